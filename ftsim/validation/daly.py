"""Validation of the simulator against closed forms (used by the tests and ``validate``).

Daly (2006) gives the expected wall time of periodic checkpointing under exponential
failures, with failures also striking checkpoints and restarts — exactly the situation
``scenarios/daly.yaml`` simulates with the ``full`` policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ftsim.experiments.prepare import prepare
from ftsim.experiments.stats import mean_ci
from ftsim.scenario.loader import load_scenario
from ftsim.sim.failures import job_mtbf_s
from ftsim.sim.theory import daly_interval_s, daly_wall_s
from ftsim.validation import finished_runs

DALY_SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "daly.yaml"


@dataclass(frozen=True)
class DalyPoint:
    """Simulated versus predicted mean wall time at one checkpoint interval."""

    interval_s: float
    simulated_h: float
    ci95_h: float
    predicted_h: float
    n: int

    @property
    def within(self) -> float:
        """|simulated − predicted| in confidence-interval half-widths."""
        return abs(self.simulated_h - self.predicted_h) / self.ci95_h


def daly_inputs(scenario) -> tuple[float, float, float, float]:
    """(solve T_s, checkpoint δ, restart R, MTBF M) in seconds for a ``full`` scenario."""
    plan = prepare(scenario, 0).plan
    delta = plan.save_s
    restart = scenario.cluster.reschedule.expected_s + plan.load_s
    return scenario.job.work_s, delta, restart, job_mtbf_s(scenario)


def daly_optimum_s(path: Path = DALY_SCENARIO) -> float:
    """Daly's higher-order optimum interval for the scenario, seconds."""
    scenario = load_scenario(path)
    _, delta, _, mtbf = daly_inputs(scenario)
    return daly_interval_s(delta, mtbf)


def daly_points(
    factors: list[float], reps: int, path: Path = DALY_SCENARIO, overrides: tuple = ()
) -> list[DalyPoint]:
    """Mean simulated wall time at intervals ``factor × τ*`` against Daly's prediction."""
    tau = daly_optimum_s(path)
    points = []
    for factor in factors:
        scenario = load_scenario(path, [*overrides, f"policies.0.interval={tau * factor} s"])
        solve, delta, restart, mtbf = daly_inputs(scenario)
        prepared = prepare(scenario, 0)
        walls = [sim.wall_s / 3600 for sim in finished_runs(prepared, reps)]
        mean, half, n = mean_ci(walls)
        predicted = daly_wall_s(solve, tau * factor, delta, restart, mtbf) / 3600
        points.append(DalyPoint(tau * factor, mean, half, predicted, n))
    return points


def simulated_optimum_s(
    reps: int, training: str = "100 h", path: Path = DALY_SCENARIO, n_intervals: int = 9
) -> float:
    """Interval minimizing simulated mean overhead: quadratic fit in log τ over [τ*/2, 2τ*].

    All intervals use the same replications (common random numbers), so the fitted curve
    is smooth even with few replications.
    """
    tau = daly_optimum_s(path)
    log_factors = np.linspace(np.log(0.5), np.log(2.0), n_intervals)
    means = []
    for log_factor in log_factors:
        scenario = load_scenario(
            path, [f"policies.0.interval={tau * np.exp(log_factor)} s", f"job.training={training}"]
        )
        prepared = prepare(scenario, 0)
        means.append(np.mean([sim.wall_s for sim in finished_runs(prepared, reps)]))
    a, b, _ = np.polyfit(log_factors, means, 2)
    return float(tau * np.exp(-b / (2 * a)))
