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

A second table puts spares and repair in both (ftsim's ``cluster.operations``): 512 nodes
(4,096 GPUs) at ``meta_rsc1``'s rate as the fleet's mean, AIReSim's illustrative repair
(automatic exponential 2 h, escalation 0.8 to a manual exponential 2 days, misses 0.4 and
0.2) and bad servers (15% at 6× a good one's rate: AIReSim's random rate plus 5× it), no
warm standby and no idle node in the working pool, so every replacement is a spare or a
repaired node; host selection 3 min (ftsim: provisioning), recovery 10 min (ftsim: the
restart, ``cluster.reschedule``); per spare count, mean ETTR and failures per run.

    python benchmarks/airesim_side_by_side.py [--airesim PATH_TO_AIRESIM_CHECKOUT] [--quick]
"""

from __future__ import annotations

import argparse
import math
import sys

from ftsim.experiments.runner import simulate
from ftsim.experiments.stats import mean_ci
from ftsim.scenario.loader import load_scenario
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
    scenario = _ftsim_scenario(gpus, interval_min, "failures=[{preset: meta_rsc1}]")
    return [simulate(scenario, 0, rep).row()["ettr"] for rep in range(reps)]


def _ftsim_scenario(gpus: int, interval_min: float, *more: str):
    """``full`` every ``interval_min`` with negligible checkpoints on ``gpus`` / 8 nodes."""
    return load_scenario(
        DALY_SCENARIO,
        [
            "name=airesim_side_by_side",
            "job.tables.0.rows=1",
            "job.tables.0.dim=1",
            f"job.training={WORK_H} h",
            f"cluster.trainers={gpus // 8 - 1}",
            "cluster.emb_ps=1",
            f"cluster.reschedule.mean={RECOVERY_MIN} min",
            f"policies.0.interval={interval_min} min",
            f"run.seed={gpus}",
            *more,
        ],
    )


OPS_GPUS = 4096
SPARES = (0, 2, 8, 32)
BAD_SHARE = 0.15
SYSTEMATIC = 5.0
"""AIReSim's bad servers fail at the random rate plus 5 × it (ftsim multiplier 6)."""
HOST_SELECTION_MIN = 3.0


def airesim_operations(spares: int, reps: int) -> list[tuple[float, int]]:
    """AIReSim's (ETR, failures) per replication with ``spares`` spares and repair."""
    from airesim.params import Params
    from airesim.simulator import Simulator

    nodes = OPS_GPUS // 8
    params = Params(
        random_failure_rate=META_RSC1.rate_per_node_day / (1 + BAD_SHARE * SYSTEMATIC) / 1440,
        systematic_failure_fraction=BAD_SHARE,
        systematic_failure_rate_multiplier=SYSTEMATIC,
        recovery_time=RECOVERY_MIN,
        host_selection_time=HOST_SELECTION_MIN,
        preemption_wait_time=0.0,
        job_size=nodes,
        job_length=WORK_H * 60,
        warm_standbys=0,
        working_pool_size=nodes,
        spare_pool_size=spares,
        num_replications=reps,
    )
    runs = [Simulator(params, seed=s).run() for s in range(reps)]
    return [(r.effective_training_ratio, r.total_failures) for r in runs]


def ftsim_operations(spares: int, reps: int) -> list[tuple[float, int]]:
    """ftsim's (ETTR, failures) per replication: the same cluster as ``cluster.operations``
    (its defaults are AIReSim's repair), ``full`` every minute with negligible checkpoints."""
    operations = (
        f"cluster.operations={{spares: {spares}, provisioning: {{mean: {HOST_SELECTION_MIN} min}}, "
        f"bad_nodes: {{share: {BAD_SHARE}, multiplier: {1 + SYSTEMATIC}}}}}"
    )
    scenario = _ftsim_scenario(OPS_GPUS, 1, "failures=[{preset: meta_rsc1}]", operations)
    rows = [simulate(scenario, 0, rep).row() for rep in range(reps)]
    return [(row["ettr"], row["n_failures"]) for row in rows]


def _ci(values, digits: int = 4) -> str:
    mean, half, _ = mean_ci(values)
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


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
    print(
        f"\nSpares and repair, {OPS_GPUS:,} GPUs, {BAD_SHARE:.0%} bad servers:\n"
        "| spares | AIReSim ETR | AIReSim failures | ftsim ETTR | ftsim failures |"
    )
    for spares in SPARES[:2] if args.quick else SPARES:
        cells = [str(spares)]
        sides = [airesim_operations] if args.airesim else []
        for side in [*sides, ftsim_operations]:
            ettr, failures = zip(*side(spares, reps), strict=True)
            cells += [_ci(ettr), _ci(failures, digits=1)]
        if not args.airesim:
            cells[1:1] = ["not run", "not run"]
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
