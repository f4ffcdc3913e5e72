"""Engine speed on prod50h, timing only (``--no-trainer``).

Reports (1) the wall time of the whole command ``python -m ftsim run scenarios/prod50h.yaml
--reps 1`` (median of several runs, as a user would see it), (2) replications per second
in process, (3) that halving the iteration time leaves the simulator's cost unchanged
(phase-level model: the cost grows with events, not iterations), and (4) the cost per
replication of every policy, on prod50h and on a cluster with 10× the nodes (same job,
same failures): with the flow-level network the cost must stay event-driven.

Targets: < 1 s for the whole command, < 5 ms per replication (issue 2); every policy's
cost ≤ 1.5× its cost before the network model, and 10× nodes ≤ 1.5× the base cost
(issue 11).

    python benchmarks/engine_speed.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ftsim.scenario.loader import load_scenario
from ftsim.sim.engine import simulate

ROOT = Path(__file__).resolve().parents[1]
PROD = ROOT / "scenarios" / "prod50h.yaml"


def command_seconds(runs: int = 7) -> float:
    times = []
    with tempfile.TemporaryDirectory() as out:
        for _ in range(runs):
            start = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "ftsim",
                    "run",
                    str(PROD),
                    "--reps",
                    "1",
                    "-q",
                    "--no-trainer",
                    "-o",
                    out,
                ],
                check=True,
            )
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def per_replication_ms(overrides: list[str], reps: int = 1000) -> tuple[float, int]:
    """Median over 5 batches of the in-process cost of one replication, and its event count."""
    scenario = load_scenario(PROD, [*overrides, "trainer.enabled=false"])
    simulate(scenario, 0, 0)  # warm-up
    batches = []
    for batch in range(5):
        start = time.perf_counter()
        for rep in range(reps // 5):
            sim = simulate(scenario, 0, batch * reps + rep)
        batches.append((time.perf_counter() - start) / (reps // 5) * 1e3)
    return statistics.median(batches), next(sim.env._eid)


def per_policy_ms(overrides: list[str], reps: int = 60) -> dict[str, tuple[float, int]]:
    """Median (over 3 batches) ms per replication and SimPy events, for every policy."""
    scenario = load_scenario(PROD, [*overrides, "trainer.enabled=false"])
    out = {}
    for index, policy in enumerate(scenario.policies):
        simulate(scenario, index, 0)  # warm-up (fills the network's memos)
        batches = []
        for batch in range(3):
            start = time.perf_counter()
            for rep in range(reps // 3):
                sim = simulate(scenario, index, batch * reps + rep)
            batches.append((time.perf_counter() - start) / (reps // 3) * 1e3)
        out[policy.label] = (statistics.median(batches), next(sim.env._eid))
    return out


def main() -> None:
    print(f"whole command, 1 replication: {command_seconds():.3f} s (target < 1 s)")
    base_ms, base_events = per_replication_ms([])
    print(
        f"per replication: {base_ms:.3f} ms = {1e3 / base_ms:.0f} replications/s "
        f"({base_events} SimPy events; target < 5 ms)"
    )
    for label, iteration in (
        ("iteration time 50 ms (halved)", "50 ms"),
        ("iteration time 1 ms (1/100)", "1 ms"),
    ):
        ms, events = per_replication_ms([f"job.iteration_time={iteration}"])
        print(
            f"{label}: {ms:.3f} ms per replication ({events} events), "
            f"ratio to 100 ms: {ms / base_ms:.2f}"
        )
    base = per_policy_ms([])
    big = per_policy_ms(["cluster.trainers=200", "cluster.emb_ps=180"])
    print("policy      ms/rep (events)   10x nodes ms/rep (events)   ratio")
    for label, (ms, events) in base.items():
        big_ms, big_events = big[label]
        print(
            f"{label:10s} {ms:7.3f} ({events:4d})      {big_ms:7.3f} ({big_events:5d})"
            f"            {big_ms / ms:5.2f}"
        )


if __name__ == "__main__":
    main()
