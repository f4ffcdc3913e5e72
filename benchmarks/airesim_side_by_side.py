"""ftsim against AIReSim on an AIReSim-equivalent configuration (the table in docs/model.md).

AIReSim (github.com/karthikp-ubc/airesim, read at 7b139c7) simulates the cluster around a
job: pools, warm standbys, host selection, repair; a failure costs a constant
``recovery_time`` and nothing is lost. The same cluster in both: N = GPUs / 8 nodes failing
at 6.50 per 1000 node-days (ftsim's ``meta_rsc1`` preset), recovery R = 10 min, 200 h of
work, no bad servers, ample warm standbys (no host selection, no wait for repair). ftsim
runs ``full`` with checkpoints of negligible size every 1 min (nearly AIReSim's "nothing
lost") and every 15 min. Prints, per job size, λR, AIReSim's closed form 1/(1+λR) and mean
ETR, ftsim's e^{−λR} and mean ETTR with Daly's exact value at each interval (means ± 95%
half-widths over 20 replications). Without ``--airesim`` the AIReSim column is left out
(its closed form is still printed).

    python benchmarks/airesim_side_by_side.py [--airesim PATH_TO_AIRESIM_CHECKOUT] [--quick]
"""

from __future__ import annotations

import argparse
import math
import sys

from ftsim.experiments.tdist import mean_ci
from ftsim.scenario.loader import load_scenario
from ftsim.sim.engine import simulate
from ftsim.sim.presets import META_RSC1
from ftsim.validation.kokolis import DALY_SCENARIO, daly_ettr

GPUS = (128, 1024, 4096, 16384)
RECOVERY_MIN = 10.0
WORK_H = 200.0
REPS = 20
INTERVALS_MIN = (1, 15)


def airesim_etr(nodes: int, rate_per_node_day: float, reps: int) -> list[float]:
    """AIReSim's effective training ratio per replication (its ``Simulator``)."""
    from airesim.params import Params
    from airesim.simulator import Simulator

    params = Params(
        random_failure_rate=rate_per_node_day / 1440,
        systematic_failure_fraction=0.0,
        recovery_time=RECOVERY_MIN,
        host_selection_time=0.0,
        job_size=nodes,
        job_length=WORK_H * 60,
        warm_standbys=200,
        working_pool_size=nodes + 400,
        spare_pool_size=100,
        num_replications=reps,
    )
    return [Simulator(params, seed=s).run().effective_training_ratio for s in range(reps)]


def ftsim_ettr(gpus: int, interval_min: float, reps: int) -> list[float]:
    """ftsim's ETTR per replication: ``full`` on the same cluster."""
    nodes = gpus // 8
    scenario = load_scenario(
        DALY_SCENARIO,
        [
            "name=airesim_side_by_side",
            "job.tables.0.rows=1",
            "job.tables.0.dim=1",
            f"job.training={WORK_H} h",
            f"cluster.trainers={nodes - 1}",
            "cluster.emb_ps=1",
            f"cluster.reschedule.mean={RECOVERY_MIN} min",
            "failures=[{preset: meta_rsc1}]",
            f"policies.0.interval={interval_min} min",
            f"run.seed={gpus}",
        ],
    )
    return [simulate(scenario, 0, rep).row()["ettr"] for rep in range(reps)]


def _ci(values: list[float]) -> str:
    mean, half, _ = mean_ci(values)
    return f"{mean:.4f} ± {half:.4f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--airesim", help="path of an AIReSim checkout (its column is run)")
    parser.add_argument("--quick", action="store_true", help="two sizes, three replications")
    args = parser.parse_args(argv)
    gpus_list, reps = ((128, 1024), 3) if args.quick else (GPUS, REPS)
    if args.airesim:
        sys.path.insert(0, args.airesim)
    rate = META_RSC1.rate_per_node_day
    print(
        "| GPUs | λR | AIReSim 1/(1+λR) | AIReSim simulated | ftsim Δt→0: e^{−λR} | "
        + " | ".join(f"ftsim Δt = {t} min | exact, {t} min" for t in INTERVALS_MIN)
        + " |"
    )
    for gpus in gpus_list:
        nodes = gpus // 8
        lam_r = nodes * rate / 24 * RECOVERY_MIN / 60
        airesim = _ci(airesim_etr(nodes, rate, reps)) if args.airesim else "not run"
        cells = [f"{gpus:,}", f"{lam_r:.4f}", f"{1 / (1 + lam_r):.4f}", airesim]
        cells.append(f"{math.exp(-lam_r):.4f}")
        for interval in INTERVALS_MIN:
            exact = daly_ettr(nodes, rate, interval * 60, RECOVERY_MIN * 60)
            cells += [_ci(ftsim_ettr(gpus, interval, reps)), f"{exact:.4f}"]
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
