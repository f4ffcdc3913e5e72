"""Does the network's lone-transfer fast path pay? prod50h's policies, timing only.

A transfer that starts on an idle network runs on a schedule worked out once per
scenario × policy (``Network._transfer_alone``: two SimPy events, whatever its flows);
without the fast path every transfer goes through the general flow model
(``Network._transfer_among``: an event per completion, rates recomputed each time). The
benchmark runs the same replications both ways, alternating rounds, and prints the CPU
milliseconds per replication (medians), their ratio, and the largest relative difference
of any result column between the two (float rounding only: the two paths add the same
bytes in another order).

    python benchmarks/lone_fast_path.py [--rounds N] [--reps N] [--quick]

``--quick`` (a smoke test, run by the tests): 2 rounds of 2 replications.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROD = ROOT / "scenarios" / "prod50h.yaml"


def general_only(network_class):
    """A ``Network.transfer`` that sends every transfer through the general flow model."""

    def transfer(self, flows, label="", category=""):
        if self._lone is not None or self._active:
            self._materialize()
            finished = self._sync()
        else:  # idle: the general model starts from now
            finished = False
            self._updated_s = self.env.now
            self._wake = None
        return self._transfer_among(flows, label, category, finished)

    return transfer


def worst_difference(a: list[list[dict]], b: list[list[dict]]) -> float:
    """Largest relative difference of any numeric result between two sets of rows."""
    worst = 0.0
    for rows_a, rows_b in zip(a, b, strict=True):
        for row_a, row_b in zip(rows_a, rows_b, strict=True):
            for key, x in row_a.items():
                y = row_b[key]
                if isinstance(x, float) and isinstance(y, float) and x == x and y == y:
                    scale = max(abs(x), abs(y))
                    if scale and x != y:
                        worst = max(worst, abs(x - y) / scale)
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds per path")
    parser.add_argument("--reps", type=int, default=30, help="replications per round")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 rounds of 2 reps")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.reps = 2, 2

    import numpy  # noqa: F401 (loads the BLAS that threadpoolctl reports)
    from threadpoolctl import threadpool_info

    from ftsim.experiments.prepare import prepare_all
    from ftsim.experiments.runner import simulate_replication
    from ftsim.scenario.loader import load_scenario
    from ftsim.sim.network import Network

    scenario = load_scenario(PROD, ["trainer.enabled=false"])
    prepared = prepare_all(scenario, list(range(len(scenario.policies))))
    paths = {"fast path": Network.transfer, "general model": general_only(Network)}
    times: dict[str, list[float]] = {name: [] for name in paths}
    rows: dict[str, list] = {}
    try:
        for _ in range(args.rounds):
            for name, transfer in paths.items():
                Network.transfer = transfer
                start = time.process_time()
                done = [simulate_replication(prepared, rep) for rep in range(args.reps)]
                times[name].append((time.process_time() - start) / args.reps * 1000)
                rows[name] = [[row for _, row in replication] for replication in done]
    finally:
        Network.transfer = paths["fast path"]
    for lib in threadpool_info():
        print(f"BLAS: {lib.get('internal_api')} {lib.get('version')} {lib.get('architecture')}")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, ms in medians.items():
        print(f"{name:14s} {ms:8.3f} CPU ms per replication (6 policies, median of {args.rounds})")
    ratio = medians["general model"] / medians["fast path"]
    print(f"general / fast: {ratio:.2f}x")
    worst = worst_difference(rows["fast path"], rows["general model"])
    print(f"largest relative difference of a result: {worst:.2g}")
    if not worst < 1e-9 or math.isnan(worst):
        raise SystemExit("the two paths disagree beyond float rounding")


if __name__ == "__main__":
    main()
