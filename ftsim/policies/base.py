"""The policy interface: how a fault-tolerance strategy plugs into the simulator.

A policy has three parts:

- a ``Params`` pydantic model (its section of the scenario file, selected by ``kind``);
- a :class:`Plan`, made once per scenario by ``params.plan(inputs)`` from the
  :class:`~ftsim.policies.inputs.PlanInputs` (the job and cluster whose state it manages,
  the failures it expects): everything its replications share — intervals, predicted
  overheads, row-popularity shares, fall-back decisions — and the decisions it took for the
  user (:meth:`Plan.notices`);
- a runtime (:class:`Policy`), made for each replication by ``plan.runtime()``: that
  replication's state, which the simulator calls at a few points:

  ``start(sim)``                 the job begins;
  ``next_action_at()``           progress (compute seconds) at which ``act`` is due next;
  ``act(sim)``                   a generator of phases run at that point (e.g. a save);
  ``slowdown()``                 extra seconds per compute second, by breakdown category,
                                 while training (e.g. parity traffic) — constant between
                                 calls to ``sim.replan()``;
  ``on_failure(sim, failure)``   immediate effects of a failure (lost state, aborted saves);
  ``recover(sim, failures)``     a generator of recovery phases for all failures not yet
                                 recovered; the simulator restarts it if another failure
                                 arrives meanwhile;
  ``result_columns()``           extra columns for the result row.

What a policy does to the model is recorded as typed events (:mod:`ftsim.policies.events`)
with ``sim.model_event(EventType, **fields)``; each event type applies itself to the
co-simulated trainer. Mechanisms that must watch the trainer (a parity code kept current, an
update log, a row sampler) belong to the plan's :class:`TrainerSide`, which the
co-simulation creates once per replication (with :meth:`Plan.side_inputs`) and attaches to
whichever trainer carries the policy's state.

``sim`` is a :class:`ftsim.sim.context.PolicyContext`: the simulation, or a composed part's
view of it; a policy calls nothing else of it. Time is charged only through
``sim.phase(category, seconds)``, ``sim.transfer(category, flows)`` (bytes moved as flows on
the cluster's network, ``sim.net``) and ``sim.wait(category, event)`` (training time is
charged by the simulator itself), so the
accounting identity
``wall = ideal + save + load + lost + reschedule + degraded + other`` holds by
construction. Adding a policy is one new module defining its classes, the plan class
decorated with :func:`register` (which gives the scenario schema its ``Params``), plus its
line in :mod:`ftsim.policies.registry` (its module, name, colour and marker), from which
:mod:`ftsim.policies.catalog` imports it when a scenario names its kind
(``docs/adding_a_policy.md``)."""

from __future__ import annotations

import math
import weakref
from collections.abc import Generator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ftsim.notices import Notice, warn_renamed
from ftsim.policies.knobs import Knob
from ftsim.scenario.registry import register_policy_params

if TYPE_CHECKING:
    from ftsim.policies.inputs import PlanInputs
    from ftsim.scenario.schema import Scenario
    from ftsim.sim.context import PolicyContext
    from ftsim.sim.failures import Failure

Phases = Generator
"""A generator of SimPy events (obtained from ``sim.phase`` / ``sim.compute``)."""


class PolicyParams(BaseModel):
    """Scenario section of one policy. Subclasses add ``kind: Literal[...]`` and parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    name: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.-]+$", description="label in results (default: kind)"
    )

    exclusive_fields: ClassVar[tuple[tuple[str, ...], ...]] = ()
    """Groups of fields of which a scenario gives one (CPR's ``interval`` / ``target_pls`` /
    ``target_accuracy_loss``): an override of one member replaces the member the file had
    (:mod:`ftsim.scenario.overrides`)."""

    renamed_fields: ClassVar[dict[str, str]] = {}
    """Old field name → current one, still accepted with a deprecation note."""

    search: ClassVar[tuple[Knob, ...]] = ()
    """The fields ``ftsim advise`` searches besides the checkpoint ``interval`` (searched for
    every policy that has that field): the kind's main trade-off of cost against lost
    updates or memory (CPR-MFU's ``fraction``, ECRM's ``k``), with coarse values to try."""

    nested_policies: ClassVar[str | None] = None
    """Dotted path (with ``*``) to the policies this one is made of (``composed``: its parts'):
    a wildcard override of a field it lacks applies to them instead."""

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data):
        """Accept an old field name (:attr:`renamed_fields`) with a deprecation warning."""
        if not isinstance(data, dict):
            return data
        for old, new in cls.renamed_fields.items():
            if old in data:
                if new in data:
                    raise ValueError(f"give {new} or its old name {old}, not both")
                data = {(new if k == old else k): v for k, v in data.items()}
                warn_renamed(f"{cls.model_fields['kind'].annotation.__args__[0]}.{old}", new)
        return data

    plan_class: ClassVar[type[Plan] | None] = None
    """The plan class of this kind (set by :func:`register`)."""

    @property
    def label(self) -> str:
        return self.name or self.kind

    def plan(self, inputs: PlanInputs) -> Plan:
        """What every replication of this policy shares, planned once from ``inputs``."""
        return self.plan_class(self, inputs)

    def problems(self, scenario: Scenario) -> list[tuple[str, str]]:
        """Inconsistencies with the rest of the scenario, as (field, message): those of
        the state it would manage (:meth:`input_problems` of the scenario's inputs)."""
        from ftsim.policies.inputs import PlanInputs

        return self.input_problems(PlanInputs.of(scenario))

    def input_problems(self, inputs: PlanInputs) -> list[tuple[str, str]]:
        """Why this policy cannot plan with ``inputs`` (the whole job's, or a composed part's),
        as (field, message); empty if it can."""
        return []

    def plan_problems(self, scenario: Scenario) -> list[tuple[str, str]]:
        """What the policy's plan refuses (:class:`PlanError`), as (field, message): the
        policy is planned once, as a replication plans it (an interval a rule resolves to
        is known only then). Asked by the scenario's validation once everything else holds."""
        from ftsim.policies.inputs import PlanInputs

        try:
            self.plan(PlanInputs.of(scenario))
        except PlanError as error:
            return [(error.field, str(error))]
        return []

    def part_problems(self, dense: bool, by_rows: bool) -> list[tuple[str, str]]:
        """Why this policy cannot manage one part of the state in a ``composed`` policy, as
        (field, message); empty if it can.

        A part must recover its own state without rolling the job back: the other parts'
        state stays where it is, so a rollback would leave the model inconsistent. ``dense``:
        the part also holds the dense parameters (it handles trainer failures); ``by_rows``:
        the state is split by row popularity (a part holds a share of every shard's rows)
        rather than by whole shards. The default refuses: a policy opts in by overriding
        this with the conditions under which it never rolls back.
        """
        return [("kind", f"{self.kind} cannot manage part of the state in a composed policy")]


class PlanError(ValueError):
    """A setting found unusable while the policy plans: ``field`` (a dotted path inside the
    policy's section) and what is wrong. Reported by :meth:`PolicyParams.plan_problems`."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field

    def inside(self, prefix: str) -> PlanError:
        """The same error for a policy nested at ``prefix`` (a composed policy's part)."""
        return PlanError(f"{prefix}.{self.field}", str(self))


def check_planned_interval(work_s: float, field: str, interval_s: float, how: str) -> None:
    """PlanError at ``field`` if an action every ``interval_s`` of compute (an interval a
    rule resolved to, ``how`` saying which and from what) is more than a replication may
    simulate (:data:`ftsim.scenario.schema.MAX_EVENTS_PER_REPLICATION` over the
    failure-free time ``work_s``), before anything is planned with it: a plan's cost grows
    with its actions, so an interval of microseconds would otherwise take hours to plan and
    run."""
    from ftsim.notices import short_duration
    from ftsim.scenario import schema

    count = work_s / interval_s
    if count > schema.MAX_EVENTS_PER_REPLICATION:
        raise PlanError(
            field,
            f"{how} {short_duration(interval_s)}: about {count:.2g} checkpoints over "
            f"job.training ({short_duration(work_s)}), more than the limit of "
            f"{schema.MAX_EVENTS_PER_REPLICATION:,} events a replication may simulate; give "
            "the interval as a duration, or make failures rarer",
        )


class TrainerSide:
    """A policy's trainer-side mechanisms in the co-simulation (one per replication).

    ``model`` is the policy's co-simulated state (see :mod:`ftsim.policies.events`), held
    weakly: the model owns its side, and a strong reference back would form a cycle that
    keeps a finished replication's trainers alive until a full garbage collection. The
    co-simulation calls :meth:`attach` when a trainer starts carrying the policy's state
    (``own`` is False while the policy still follows the shared failure-free trainer, True
    on its own trainer) and :meth:`detach` when it stops (at the fork, or when the policy's
    training ends): ``detach`` must remove every listener (update or use) ``attach`` registered. The
    base class has no mechanisms.
    """

    own_from_start: ClassVar[bool] = False
    """Train on a trainer of its own from step 0 (when a mechanism must see every step
    of the policy's own trajectory, e.g. an update log)."""

    def __init__(
        self,
        params: PolicyParams,
        model,
        inputs: Mapping[str, Any] | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        self.params = params
        self.inputs: Mapping[str, Any] = inputs or {}
        """What the time model tells the side (its plan's :meth:`Plan.side_inputs`)."""
        self.rng = rng
        """The side's random stream, from the run's seed and the replication
        (:attr:`ftsim.sim.rng.Purpose.POLICY`): the trainer-side mechanisms' only source of
        randomness (e.g. SSU's sampling)."""
        try:
            self._model = weakref.ref(model)
        except TypeError:  # None or a stand-in without weak references (unit tests)
            self._model = lambda: model

    @property
    def model(self):
        """The policy's co-simulated state (:class:`ftsim.cosim.replay.PolicyModel`)."""
        return self._model()

    def attach(self, trainer, own: bool) -> None:
        """Start watching ``trainer``."""

    def detach(self, trainer) -> None:
        """Stop watching ``trainer``."""

    def snapshotted(self, trainer, key: float) -> None:
        """CheckFreq's first half (a :class:`~ftsim.policies.events.Snapshot`): all state was
        just copied in memory as checkpoint ``key``. It is not in storage yet: until the
        matching :meth:`checkpointed` (the persist committed) the previous checkpoint stays
        the durable one, and a failure before then loses this one. A side that remembers the
        saved state (a replay base) keeps it aside here and adopts it there."""

    def checkpointed(self, trainer) -> None:
        """A checkpoint became durable: a synchronous one was just saved (a
        :class:`~ftsim.policies.events.Checkpoint`), or the persist of the last
        :meth:`snapshotted` state committed (a :class:`~ftsim.policies.events.Commit`;
        ``trainer`` is then already past the snapshot's step)."""

    def restored(self, trainer) -> None:
        """State was just restored from storage, bypassing the trainer's update listeners."""

    def columns(self) -> dict[str, float]:
        """Extra result columns measured on the trainer."""
        return {}


class Plan:
    """What every replication of one policy in one scenario shares (see the module
    docstring): made once by ``params.plan(inputs)``, read-only afterwards; each
    replication's state is a :attr:`Runtime` made by :meth:`runtime`."""

    Runtime: ClassVar[type[Policy]]
    TrainerSide: ClassVar[type[TrainerSide]] = TrainerSide
    part_names: tuple[str, ...] = ()
    """Names of the parts the policy is made of (``composed``), whose time the simulator
    also sums per part; empty for a policy of one piece."""

    def __init__(self, params: PolicyParams, inputs: PlanInputs):
        self.params = params
        self.inputs = inputs
        self.layout = inputs.layout
        """Bytes of state per node, and lone-transfer times (closed forms for planning)."""

    def runtime(self) -> Policy:
        """One replication's state (its random draws are the simulation's, by replication)."""
        return self.Runtime(self)

    def notices(self) -> list[Notice]:
        """Decisions taken for the user when planning, to be said once per run or sweep
        point (:func:`ftsim.experiments.sweep.policy_notices`)."""
        return []

    def trained_notices(self, rows_per_shard: float) -> list[Notice]:
        """What the embedded trainer, whose tables hold ``rows_per_shard`` rows per embedding
        shard (far fewer than the job's), cannot represent of this plan's setting: said once
        per run or sweep point whose replications train it
        (:func:`ftsim.experiments.sweep.policy_notices`)."""
        return []

    def side_inputs(self) -> dict[str, Any]:
        """What the policy's :class:`TrainerSide` needs from the time model (e.g. SSU's
        buffer size), handed to it when the co-simulation builds it."""
        return {}


class Policy:
    """Runtime base class: one replication's state; see the module docstring for the
    protocol."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.params = plan.params
        self.layout = plan.layout
        self.n_checkpoints = 0
        """Checkpoints committed so far (a result column)."""

    @property
    def part_names(self) -> tuple[str, ...]:
        return self.plan.part_names

    def start(self, sim: PolicyContext) -> None:
        """Called once when the job starts."""

    def next_action_at(self) -> float:
        """Progress (compute seconds) at which :meth:`act` is due; ``inf`` for never."""
        return math.inf

    def act(self, sim: PolicyContext) -> Phases:
        """Phases run when progress reaches :meth:`next_action_at`."""
        yield from ()

    def slowdown(self) -> dict[str, float]:
        """Extra wall seconds per second of compute, by breakdown category."""
        return {}

    def slowdown_by_part(self) -> dict[str, dict[str, float]]:
        """:meth:`slowdown` split over :attr:`part_names` (only asked when there are parts)."""
        return {}

    def on_failure(self, sim: PolicyContext, failure: Failure) -> None:
        """Immediate effects of a failure, at the failure instant."""

    def recover(self, sim: PolicyContext, failures: list[Failure]) -> Phases:
        """Phases that bring the job back after ``failures``."""
        yield from ()

    def result_columns(self) -> dict[str, float | str]:
        """Policy-specific columns of the result row (extra memory per embedding PS as a
        share of its shard in columns ending in :data:`MEMORY_SUFFIX`)."""
        return {}


MEMORY_SUFFIX = "_mem_frac"
"""Result columns holding a policy's extra memory per embedding PS as a share of its shard
(CPR's use tracker, ECRM's parity, a composition's parts together): their sum is the
policy's memory overhead (``ftsim advise``'s limit). A composed policy's part columns
(``<part>/...``) are the part's own, on its rows: its total is ``parts_mem_frac``."""


def memory_frac(row: dict) -> float:
    """A result row's extra memory per embedding PS as a share of its shard: the sum of its
    :data:`MEMORY_SUFFIX` columns, but a composed policy's parts' (theirs are in its
    ``parts_mem_frac``)."""
    return math.fsum(v for k, v in row.items() if k.endswith(MEMORY_SUFFIX) and "/" not in k)


def register(params: type[PolicyParams]):
    """Class decorator of a plan class: make it the plan of ``params``'s kind, and
    ``params`` a section the scenario schema accepts (:mod:`ftsim.scenario.registry`)."""

    def decorate(cls: type[Plan]) -> type[Plan]:
        if params.__dict__.get("plan_class") is not None:
            raise ValueError(f"{params.__name__} registered twice")
        params.plan_class = cls
        register_policy_params(params)
        return cls

    return decorate
