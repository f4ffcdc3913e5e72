"""The policy interface: how a fault-tolerance strategy plugs into the simulator.

A policy has two parts:

- a ``Params`` pydantic model (its section of the scenario file, selected by ``kind``);
- a runtime class, one instance per replication, that the simulator calls at a few points:

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
update log, a row sampler) belong to the policy's :class:`TrainerSide`, which the
co-simulation creates once per replication and attaches to whichever trainer carries the
policy's state.

``sim`` is a :class:`ftsim.sim.context.PolicyContext`: the simulation, or a composed part's
view of it; a policy calls nothing else of it. Time is charged only through
``sim.phase(category, seconds)``, ``sim.transfer(category, flows)`` (bytes moved as flows on
the cluster's network, ``sim.net``) and ``sim.wait(category, event)`` (training time is
charged by the simulator itself), so the
accounting identity
``wall = ideal + save + load + lost + reschedule + degraded + other`` holds by
construction. Adding a policy is one new module defining its classes, the runtime class
decorated with :func:`register` (which gives the scenario schema its ``Params``), plus its
line in :mod:`ftsim.policies.registry` (name and colour) and in :mod:`ftsim.policies.catalog`
(which imports it).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Generator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ftsim.notices import Notice, warn_renamed
from ftsim.scenario.registry import register_policy_params

if TYPE_CHECKING:
    from ftsim.scenario.schema import Scenario
    from ftsim.sim.cluster import StateLayout
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

    policy_class: ClassVar[type[Policy] | None] = None
    """The runtime class of this kind (set by :func:`register`)."""

    @property
    def label(self) -> str:
        return self.name or self.kind

    def problems(self, scenario: Scenario) -> list[tuple[str, str]]:
        """Inconsistencies with the rest of the scenario, as (field, message)."""
        return []

    def plan_problems(self, scenario: Scenario) -> list[tuple[str, str]]:
        """What the policy's plan refuses (:class:`PlanError`), as (field, message): the
        policy is planned once, as a replication plans it (an interval a rule resolves to
        is known only then). Asked by the scenario's validation once everything else holds."""
        from ftsim.sim.cluster import StateLayout

        try:
            self.policy_class(self, scenario, StateLayout(scenario))
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


def check_planned_interval(scenario: Scenario, field: str, interval_s: float, how: str) -> None:
    """PlanError at ``field`` if an action every ``interval_s`` of compute (an interval a
    rule resolved to, ``how`` saying which and from what) is more than a replication may
    simulate (:data:`ftsim.scenario.schema.MAX_EVENTS_PER_REPLICATION` over the
    failure-free time), before anything is planned with it: a plan's cost grows with its
    actions, so an interval of microseconds would otherwise take hours to plan and run."""
    from ftsim.notices import short_duration
    from ftsim.scenario import schema

    work_s = scenario.job.work_s
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
    training ends): ``detach`` must remove every update listener ``attach`` registered. The
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
        """What the time model tells the side (the policy's :meth:`Policy.side_inputs`)."""
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


class Policy:
    """Runtime base class; see the module docstring for the protocol."""

    Params: ClassVar[type[PolicyParams]]
    TrainerSide: ClassVar[type[TrainerSide]] = TrainerSide
    part_names: tuple[str, ...] = ()
    """Names of the parts the policy is made of (``composed``), whose time the simulator
    also sums per part; empty for a policy of one piece."""

    def __init__(
        self,
        params: PolicyParams,
        scenario: Scenario,
        layout: StateLayout,
    ):
        self.params = params
        self.scenario = scenario
        self.layout = layout
        self.n_checkpoints = 0
        """Checkpoints committed so far (a result column)."""

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
        """Policy-specific columns of the result row."""
        return {}

    def notices(self) -> list[Notice]:
        """Decisions the policy took for the user when it planned (at construction), to be
        said once per run or sweep point (:func:`ftsim.experiments.sweep.policy_notices`)."""
        return []

    def side_inputs(self) -> dict[str, Any]:
        """What the policy's :class:`TrainerSide` needs from the time model (e.g. SSU's
        buffer size), handed to it when the co-simulation builds it."""
        return {}


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make a policy runtime the one of its ``Params.kind``, and its
    ``Params`` a section the scenario schema accepts (:mod:`ftsim.scenario.registry`)."""
    if cls.Params.__dict__.get("policy_class") is not None:
        raise ValueError(f"{cls.Params.__name__} registered twice")
    cls.Params.policy_class = cls
    register_policy_params(cls.Params)
    return cls
