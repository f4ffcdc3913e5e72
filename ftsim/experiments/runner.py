"""Running a scenario: every selected policy × replication on the same failure draws.

Each policy is prepared once (:mod:`ftsim.experiments.prepare`) and its replications built
on what it prepared. A replication's policies are simulated together: when the replication
trains the embedded model they share one failure-free trainer (:mod:`ftsim.cosim.replay`).
Replications are independent (common random numbers: replication *i* is fully determined
by the seed and *i*), so they can run in any order and in any process: the study layer
(:mod:`ftsim.experiments.study`) spreads them over workers as tasks and gets rows identical
to a serial run.

While it simulates, Python's cyclic garbage collector is tuned for the loop
(:func:`replication_gc`).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from ftsim.experiments import pool
from ftsim.experiments.prepare import Prepared, prepare, prepare_each
from ftsim.scenario.schema import Scenario
from ftsim.sim.engine import Simulation
from ftsim.sim.failures import FailureDraws

YOUNG_COLLECTION = 20_000
"""Net allocations of container objects between two collections of the youngest
generation while replications run (CPython's default: 700)."""

_gc_lock = threading.Lock()
_gc_users = 0
_gc_thresholds: tuple[int, int, int] = (0, 0, 0)
_gc_froze = False


@contextmanager
def replication_gc() -> Iterator[None]:
    """Python's cyclic garbage collector tuned for a loop of replications, and restored
    after it: what exists when the loop starts (modules, the scenario, the prepared plans:
    ~10^5 objects) is frozen out of the collections (:func:`gc.freeze`), and the youngest
    generation is collected every :data:`YOUNG_COLLECTION` allocations. A replication
    allocates thousands of small containers (events, phases, flows) that die with it, and a
    few that live on (rows, the memos of the flow model); with CPython's defaults the
    collections, each oldest one rescanning everything, took a fifth of a replication's
    time. It changes when memory is reclaimed, never a result. Nested and concurrent uses
    (threads) share one setting, restored when the last ends. Objects someone else froze
    (a pool's worker forked from a frozen parent, :mod:`ftsim.experiments.pool`) are left
    to them: then nothing more is frozen, nor unfrozen after. A pool worker knows it holds
    frozen objects without counting them (:func:`ftsim.experiments.pool.in_worker`):
    counting walks each of them, ~5 ms per task on prod50h's sweep, which made a worker's
    tasks half again as slow as the same tasks run in the parent."""
    global _gc_users, _gc_thresholds, _gc_froze
    with _gc_lock:
        if _gc_users == 0:
            _gc_thresholds = gc.get_threshold()
            _gc_froze = not (pool.in_worker() or gc.get_freeze_count())
            if _gc_froze:
                gc.freeze()
            gc.set_threshold(YOUNG_COLLECTION, *_gc_thresholds[1:])
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0:
                gc.set_threshold(*_gc_thresholds)
                if _gc_froze:
                    gc.unfreeze()


def simulate(
    scenario: Scenario, policy_index: int, rep: int, record_flows: bool = False
) -> Simulation:
    """Run one replication of one policy, prepared for it alone, and return the finished
    simulation (many replications: :func:`simulate_reps`)."""
    return prepare(scenario, policy_index).replicate(rep, record_flows).run()


def simulate_replication(prepared: list[Prepared], rep: int, timeline: bool = True) -> list:
    """(simulation, row) of replication ``rep`` for each prepared policy, with the model
    columns when the replication trains the embedded model (the policies share one
    failure-free trainer). The policies of one scenario read one draw of the replication's
    failures. Where the replication trains the model, the scenarios (one, or several: a
    sweep's points) must train the same failure-free model
    (:func:`ftsim.cosim.replay.model_setting`). ``timeline``: record the simulations'
    timelines; their model events are recorded when the replication trains the model (what
    uses them)."""
    if not prepared:
        return []
    scenario = prepared[0].scenario
    draws: dict[int, FailureDraws] = {}  # by the scenario's id: a scenario is not hashable
    trains = scenario.trains_model(rep)
    sims = []
    for policy in prepared:
        mine = policy.scenario
        failures = draws.get(id(mine))
        if failures is None:
            failures = draws[id(mine)] = FailureDraws(mine, rep)
        sims.append(
            policy.replicate(rep, failures=failures, timeline=timeline, model_events=trains).run()
        )
    rows = [sim.row() for sim in sims]
    if trains:
        train(scenario, sims, rows)
    return list(zip(sims, rows, strict=True))


def train(scenario: Scenario, sims: list, rows: list[dict]) -> None:
    """Co-simulate one replication's policies (``sims``) on the embedded model and add the
    model columns (:func:`ftsim.cosim.replay.cosimulate`) to their ``rows``."""
    from ftsim.cosim.replay import cosimulate

    for row, model in zip(rows, cosimulate(scenario, sims), strict=True):
        row.update(model)


def training_cost(scenario: Scenario, rep: int, policies: int) -> float:
    """An estimate of the trainer steps replication ``rep`` of ``scenario`` trains with
    ``policies`` policies, to start the costliest first (no result depends on it): the
    failure-free trainer's steps, plus one trainer per policy from the first failure on,
    where the policies that lose state leave the shared trainer
    (:mod:`ftsim.cosim.replay`); the failure's wall time stands in for its progress. On
    prod50h the own steps of the 20 trained replications follow their first failure
    (correlation -0.99999), and so does their CPU time (0.89)."""
    steps = scenario.trainer.steps
    first = FailureDraws(scenario, rep).get(0)
    if first is None:
        return float(steps)
    return steps * (1.0 + policies * max(0.0, 1.0 - first.time_s / scenario.job.work_s))


def simulate_reps(
    scenario: Scenario,
    policy_indices: list[int],
    reps: Iterable[int],
    timeline_rep: int | None = None,
) -> tuple[list[list[dict]], list[list[dict]]]:
    """Per policy (in the order of ``policy_indices``, each prepared once): its rows of
    ``reps``, and its timeline of replication ``timeline_rep`` (empty if not among
    ``reps``)."""
    return simulate_policies([(scenario, q) for q in policy_indices], reps, timeline_rep)


def simulate_policies(
    policies: list[tuple[Scenario, int]],
    reps: Iterable[int],
    timeline_rep: int | None = None,
) -> tuple[list[list[dict]], list[list[dict]]]:
    """:func:`simulate_reps` for (scenario, policy index) pairs, of one scenario or of
    several (a sweep's points) that train the same failure-free model
    (:func:`ftsim.cosim.replay.model_setting`): where a replication trains the model, one
    failure-free trainer serves the policies of all of them."""
    prepared = prepare_each(policies)
    rows: list[list[dict]] = [[] for _ in policies]
    timelines: list[list[dict]] = [[] for _ in policies]
    with replication_gc():
        for rep in reps:
            done = simulate_replication(prepared, rep, timeline=rep == timeline_rep)
            for mine, timeline, (sim, row) in zip(rows, timelines, done, strict=True):
                mine.append(row)
                if rep == timeline_rep:
                    timeline += sim.timeline_rows()
    return rows, timelines
