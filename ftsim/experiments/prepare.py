"""Prepare once, replicate many: what every replication of one scenario × policy shares.

A replication is fully determined by the scenario, the policy and its number (common random
numbers), and most of what it needs does not depend on the number at all: the policy's
plan (intervals, predicted overheads, row-popularity shares, fall-back decisions; see
:mod:`ftsim.policies.base`) and the cluster's links and routes with what the flow model
has worked out over them. :func:`prepare` builds that once; :meth:`Prepared.replicate`
builds one replication on it. A :class:`Prepared` is the only state replications share,
and it lives as long as whoever holds it: a run or a sweep task holds one per policy
for the replications it simulates, then drops it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ftsim.policies import catalog  # noqa: F401 (every policy kind, before a scenario loads)
from ftsim.policies.base import Plan
from ftsim.policies.inputs import PlanInputs
from ftsim.scenario.schema import Scenario
from ftsim.sim.cluster import SharedRoutes
from ftsim.sim.engine import Simulation
from ftsim.sim.failures import FailureDraws


@dataclass(frozen=True)
class Prepared:
    """One policy of one scenario, planned, with the routes its replications share."""

    scenario: Scenario
    plan: Plan
    routes: SharedRoutes = field(default_factory=SharedRoutes)
    """The links, routes and repeated transfers of the cluster, and what the flow model
    memoized over them: filled by the replications as they need them."""

    def replicate(
        self,
        rep: int,
        record_flows: bool = False,
        failures: FailureDraws | None = None,
        timeline: bool = True,
        model_events: bool = True,
    ) -> Simulation:
        """Replication ``rep``, built and not yet run (``record_flows``, ``timeline``,
        ``model_events``: what it records, see :class:`~ftsim.sim.engine.Simulation`;
        ``failures``: its failure draws, when the other policies of the replication share
        them)."""
        plan = self.plan
        return Simulation(
            self.scenario,
            rep,
            plan.runtime(),
            plan.layout,
            self.routes,
            record_flows,
            failures,
            timeline,
            model_events,
        )


def prepare(scenario: Scenario, policy_index: int, inputs: PlanInputs | None = None) -> Prepared:
    """Plan policy ``policy_index`` of ``scenario`` (with the scenario's
    :class:`~ftsim.policies.inputs.PlanInputs`, or ``inputs`` already made for it)."""
    params = scenario.policies[policy_index]
    return Prepared(scenario, params.plan(inputs or PlanInputs.of(scenario)))


def prepare_all(scenario: Scenario, policy_indices: list[int]) -> list[Prepared]:
    """:func:`prepare` for each of ``policy_indices`` (the inputs made once)."""
    return prepare_each([(scenario, index) for index in policy_indices])


def prepare_each(policies: list[tuple[Scenario, int]]) -> list[Prepared]:
    """:func:`prepare` for each (scenario, policy index), each scenario's inputs made once."""
    inputs: dict[int, PlanInputs] = {}  # by the scenario's id: a scenario is not hashable
    prepared = []
    for scenario, index in policies:
        if id(scenario) not in inputs:
            inputs[id(scenario)] = PlanInputs.of(scenario)
        prepared.append(prepare(scenario, index, inputs[id(scenario)]))
    return prepared
