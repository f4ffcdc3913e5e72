"""Running a scenario: every selected policy × replication on the same failure draws.

A replication's policies are simulated together: when the replication trains the embedded
model they share one failure-free trainer (:mod:`ftsim.cosim.replay`). Replications are
independent (common random numbers: replication *i* is fully determined by the seed and
*i*), so they can run in any order and in any process: the study layer
(:mod:`ftsim.experiments.study`) spreads them over workers as tasks and gets rows identical
to a serial run.
"""

from __future__ import annotations

from collections.abc import Iterable

from ftsim.policies import catalog  # noqa: F401 (every policy kind, before a scenario loads)
from ftsim.scenario.schema import Scenario
from ftsim.sim.engine import Simulation


def build_simulation(
    scenario: Scenario, policy_index: int, rep: int, record_flows: bool = False
) -> Simulation:
    """Replication ``rep`` of policy ``policy_index``, built and not yet run: the engine gets
    the policy's runtime from its ``Params`` (``record_flows``: see :class:`Simulation`)."""
    params = scenario.policies[policy_index]

    def make_policy(layout):
        return params.policy_class(params, scenario, layout)

    return Simulation(scenario, rep, make_policy, record_flows)


def simulate(
    scenario: Scenario, policy_index: int, rep: int, record_flows: bool = False
) -> Simulation:
    """Run one replication of one policy and return the finished simulation."""
    return build_simulation(scenario, policy_index, rep, record_flows).run()


def simulate_replication(scenario: Scenario, policy_indices: list[int], rep: int) -> list:
    """Simulations of one replication for these policies, with the model columns when the
    replication trains the embedded model (the policies share one failure-free trainer)."""
    sims = [simulate(scenario, index, rep) for index in policy_indices]
    rows = [sim.row() for sim in sims]
    if scenario.trains_model(rep):
        train(scenario, sims, rows)
    return list(zip(sims, rows, strict=True))


def train(scenario: Scenario, sims: list, rows: list[dict]) -> None:
    """Co-simulate one replication's policies (``sims``) on the embedded model and add the
    model columns (:func:`ftsim.cosim.replay.cosimulate`) to their ``rows``."""
    from ftsim.cosim.replay import cosimulate

    for row, model in zip(rows, cosimulate(scenario, sims), strict=True):
        row.update(model)


def simulate_reps(
    scenario: Scenario,
    policy_indices: list[int],
    reps: Iterable[int],
    timeline_rep: int | None = None,
) -> tuple[list[list[dict]], list[list[dict]]]:
    """Per policy (in the order of ``policy_indices``): its rows of ``reps``, and its
    timeline of replication ``timeline_rep`` (empty if not among ``reps``)."""
    rows: list[list[dict]] = [[] for _ in policy_indices]
    timelines: list[list[dict]] = [[] for _ in policy_indices]
    for rep in reps:
        for mine, timeline, (sim, row) in zip(
            rows, timelines, simulate_replication(scenario, policy_indices, rep), strict=True
        ):
            mine.append(row)
            if rep == timeline_rep:
                timeline += sim.timeline_rows()
    return rows, timelines
