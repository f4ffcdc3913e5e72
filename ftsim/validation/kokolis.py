"""Kokolis et al.'s expected-ETTR model as an outside check of full checkpointing at scale
(used by ``validate`` and the tests).

Kokolis et al. (Revisiting Reliability in Large-Scale Machine Learning Research Clusters,
HPCA 2025, arXiv 2410.21680) estimate a job's effective training time ratio from four job
parameters: its size N (nodes), the failure rate r_f per node-day, the checkpoint interval
Δt_cp and the restart overhead u_0 (time from a failure to resumed progress). Failures
arrive at N·r_f; each costs u_0 plus, on average, half a checkpoint interval of progress:

    E[ETTR] ≈ 1 − N · r_f · (u_0 + Δt_cp / 2)

a first-order model: it neglects failures during a restart or during the redone work, so
it is exact as ε = N·r_f·(u_0 + Δt_cp/2) → 0 and its error is O(ε²) (for exponential
failures the exact renewal result, Daly's, differs from it by at most ε² to second order).
The form above is the first-order model in those four parameters as the paper's abstract
and secondary summaries describe it; the paper's body text (its equation) could not be
read in this session, so the form is stated here rather than quoted.

No ftsim parameter is fitted to it, but it is not a model of another kind: it is the
first-order renewal argument of Young's and Daly's (one failure costs the restart and half
an interval), at the rate RSC-1 reported (6.50 per 1000 node-days, as secondary summaries
give it; the check uses the same rate on both sides, so any rate would do). It checks the
simulator's failure, restart and lost-work mechanics at thousands of nodes, not an
independent theory; at 16,384 GPUs its tolerance admits both the first-order value and the
exact renewal one, which the figure tells apart. The simulated jobs are
``full`` checkpointing on N = GPUs / 8 nodes failing by the ``meta_rsc1`` preset (6.50 per
1000 node-days), checkpoint writes and reloads of negligible size (the model has no write
cost), the restart overhead as a constant rescheduling delay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ftsim.experiments.prepare import prepare
from ftsim.experiments.stats import mean_ci
from ftsim.scenario.loader import load_scenario
from ftsim.sim.presets import DAY_S, META_RSC1
from ftsim.validation import finished_runs
from ftsim.validation.daly import DALY_SCENARIO

KOKOLIS = "Kokolis et al., HPCA 2025 (arXiv 2410.21680), expected-ETTR model"

GPUS = (128, 1024, 4096, 16384)
"""Job sizes checked, GPUs (nodes of 8)."""
GPUS_PER_NODE = 8
RESTART_S = 600.0
"""u_0: restart overhead, seconds (10 min; the constant rescheduling delay)."""
INTERVAL_S = 900.0
"""Δt_cp: checkpoint interval, seconds (15 min)."""
WORK_H = 200.0
"""Failure-free training time of each job, hours."""


def expected_ettr(nodes: int, rate_per_node_day: float, interval_s: float, restart_s: float):
    """Kokolis et al.'s first-order expected ETTR: 1 − N r_f (u_0 + Δt_cp / 2)."""
    return 1.0 - first_order_loss(nodes, rate_per_node_day, interval_s, restart_s)


def first_order_loss(nodes: int, rate_per_node_day: float, interval_s: float, restart_s: float):
    """ε = N r_f (u_0 + Δt_cp / 2), the share of wall time the model says is lost; the
    model's neglected terms are O(ε²)."""
    return nodes * rate_per_node_day / DAY_S * (restart_s + interval_s / 2)


def daly_ettr(nodes: int, rate_per_node_day: float, interval_s: float, restart_s: float):
    """The exact expected ETTR of periodic checkpointing without write cost under
    exponential failures that also strike restarts (Daly 2006's T_w with δ = 0):
    λτ / (e^{λR} (e^{λτ} − 1)), λ = N r_f. For comparison in the figure, not the oracle."""
    lam = nodes * rate_per_node_day / DAY_S
    return lam * interval_s / (math.exp(lam * restart_s) * math.expm1(lam * interval_s))


def scenario_for(gpus: int):
    """``full`` checkpointing every Δt_cp on GPUs / 8 nodes failing by ``meta_rsc1``, with
    a constant restart u_0 and negligible checkpoint bytes (one 1-value table)."""
    nodes = gpus // GPUS_PER_NODE
    return load_scenario(
        DALY_SCENARIO,
        [
            "name=kokolis_ettr",
            "job.tables.0.rows=1",
            "job.tables.0.dim=1",
            f"job.training={WORK_H} h",
            f"cluster.trainers={nodes - 1}",
            "cluster.emb_ps=1",
            f"cluster.reschedule.mean={RESTART_S} s",
            "failures=[{preset: meta_rsc1}]",
            f"policies.0.interval={INTERVAL_S} s",
            f"run.seed={gpus}",
        ],
    )


@dataclass(frozen=True)
class EttrPoint:
    """Simulated mean ETTR against the model at one job size."""

    gpus: int
    model: float
    tolerance_model: float
    """ε²: the model's neglected second-order terms."""
    simulated: float
    ci95: float
    n: int
    daly: float

    @property
    def tolerance(self) -> float:
        """ε² + 3 × the 95% half-width of the simulated mean."""
        return self.tolerance_model + 3 * self.ci95

    @property
    def passed(self) -> bool:
        return abs(self.simulated - self.model) <= self.tolerance


def ettr_points(reps: int, gpus: tuple[int, ...] = GPUS) -> list[EttrPoint]:
    """The simulated mean ETTR of each job size over ``reps`` replications, with the model."""
    points = []
    rate = META_RSC1.rate_per_node_day
    for size in gpus:
        scenario = scenario_for(size)
        nodes = size // GPUS_PER_NODE
        prepared = prepare(scenario, 0)
        ettr = [sim.row()["ettr"] for sim in finished_runs(prepared, reps)]
        mean, half, n = mean_ci(ettr)
        args = (nodes, rate, INTERVAL_S, RESTART_S)
        points.append(
            EttrPoint(
                gpus=size,
                model=expected_ettr(*args),
                tolerance_model=first_order_loss(*args) ** 2,
                simulated=mean,
                ci95=0.0 if np.isnan(half) else half,
                n=n,
                daly=daly_ettr(*args),
            )
        )
    return points
