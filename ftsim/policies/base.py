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

Time is charged only through ``sim.phase(category, seconds)`` and ``sim.wait(category,
event)`` (training time is charged by the simulator itself), so the accounting identity
``wall = ideal + save + load + lost + reschedule + degraded + other`` holds by
construction. Adding a policy is one new module defining both classes,
decorated with :func:`register`, plus its import line in ``ftsim/policies/__init__.py``.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from ftsim.scenario.schema import Scenario
    from ftsim.sim.cluster import StateLayout
    from ftsim.sim.engine import Simulation
    from ftsim.sim.failures import Failure

Phases = Generator
"""A generator of SimPy events (obtained from ``sim.phase`` / ``sim.compute``)."""


class PolicyParams(BaseModel):
    """Scenario section of one policy. Subclasses add ``kind: Literal[...]`` and parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    name: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.-]+$", description="label in results (default: kind)"
    )

    @property
    def label(self) -> str:
        return self.name or self.kind

    def problems(self, scenario: Scenario) -> list[tuple[str, str]]:
        """Inconsistencies with the rest of the scenario, as (field, message)."""
        return []


class Policy:
    """Runtime base class; see the module docstring for the protocol."""

    Params: ClassVar[type[PolicyParams]]

    def __init__(
        self,
        params: PolicyParams,
        scenario: Scenario,
        layout: StateLayout,
        rng: np.random.Generator,
    ):
        self.params = params
        self.scenario = scenario
        self.layout = layout
        self.rng = rng
        self.n_checkpoints = 0
        """Checkpoints committed so far (a result column)."""

    def start(self, sim: Simulation) -> None:
        """Called once when the job starts."""

    def next_action_at(self) -> float:
        """Progress (compute seconds) at which :meth:`act` is due; ``inf`` for never."""
        return math.inf

    def act(self, sim: Simulation) -> Phases:
        """Phases run when progress reaches :meth:`next_action_at`."""
        yield from ()

    def slowdown(self) -> dict[str, float]:
        """Extra wall seconds per second of compute, by breakdown category."""
        return {}

    def on_failure(self, sim: Simulation, failure: Failure) -> None:
        """Immediate effects of a failure, at the failure instant."""

    def recover(self, sim: Simulation, failures: list[Failure]) -> Phases:
        """Phases that bring the job back after ``failures``."""
        yield from ()

    def result_columns(self) -> dict[str, float | str]:
        """Policy-specific columns of the result row."""
        return {}


REGISTRY: dict[str, type[Policy]] = {}


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make a policy available under its ``Params.kind``."""
    kind = cls.Params.model_fields["kind"].annotation.__args__[0]
    if kind in REGISTRY:
        raise ValueError(f"policy kind {kind!r} registered twice")
    REGISTRY[kind] = cls
    return cls
