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

The per-policy table (4) is measured in fresh processes on one BLAS thread (``--rounds``
of them; in each, after an untimed warm-up, every policy and scale in turn simulates
``--reps`` replications, ``--cycles`` times, and its figure is the median batch): CPU ms
per replication, the median over processes. ``--compare DIR`` adds another checkout of
ftsim (e.g. ``git worktree add /tmp/before f48ff0e``, the commit before the network
model), run on its own ``scenarios/prod50h.yaml`` at 1× nodes in processes alternating
with this checkout's, so both see the same machine; the table then gains its ms and the
ratio new / old (the median of the per-round ratios). The BLAS library the workers use is
printed (threadpoolctl). CPU time, medians and pairs keep the figures steady on a shared
machine.

    python benchmarks/engine_speed.py
    python benchmarks/engine_speed.py --table-only --compare /tmp/before --rounds 7
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROD = ROOT / "scenarios" / "prod50h.yaml"
BIG = ["cluster.trainers=200", "cluster.emb_ps=180"]
"""10× the nodes of prod50h (same job, same failures)."""
WARM_UP = 10
"""Replications of every policy run untimed first in each worker (numbers after the timed
ones)."""
ONE_THREAD = {
    name: "1"
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")
}


def _engine():
    """``(load_scenario, simulate)`` of whichever ftsim is importable: this layout, or the
    flat one of commits before the package was split (for ``--compare``)."""
    try:
        from ftsim.scenario.loader import load_scenario
        from ftsim.sim.engine import simulate
    except ImportError:  # the flat layout
        load_scenario = importlib.import_module("ftsim.scenario").load_scenario
        simulate = importlib.import_module("ftsim.engine").simulate
    return load_scenario, simulate


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
    load_scenario, simulate = _engine()
    scenario = load_scenario(PROD, [*overrides, "trainer.enabled=false"])
    simulate(scenario, 0, 0)  # warm-up
    batches = []
    for batch in range(5):
        start = time.perf_counter()
        for rep in range(reps // 5):
            sim = simulate(scenario, 0, batch * reps + rep)
        batches.append((time.perf_counter() - start) / (reps // 5) * 1e3)
    return statistics.median(batches), next(sim.env._eid)


def worker(root: Path, big: bool, reps: int, cycles: int) -> None:
    """Print as JSON the ms per replication of every policy of ``root``'s prod50h (and with
    10× nodes if ``big``), and the BLAS libraries loaded.

    After an untimed warm-up (memos filled, allocator and caches warm), ``cycles`` times in
    turn every policy (and scale) simulates replications 1 … ``reps``; a figure is the
    median over cycles of its mean CPU ms per replication, so that a burst of load from
    elsewhere on the machine spoils a few batches, not a whole policy."""
    from threadpoolctl import threadpool_info

    load_scenario, simulate = _engine()
    path = root / "scenarios" / "prod50h.yaml"
    scenarios = {"1x": load_scenario(path, ["trainer.enabled=false"])}
    if big:
        scenarios["10x"] = load_scenario(path, [*BIG, "trainer.enabled=false"])
    runs = [
        (f"{scale} {policy.label}", scenario, index)
        for scale, scenario in scenarios.items()
        for index, policy in enumerate(scenario.policies)
    ]
    for _, scenario, index in runs:
        for rep in range(reps + 1, reps + 1 + WARM_UP):
            simulate(scenario, index, rep)
    batches: dict[str, list[float]] = {key: [] for key, _, _ in runs}
    for _ in range(cycles):
        for key, scenario, index in runs:
            start = time.process_time()
            for rep in range(1, reps + 1):
                simulate(scenario, index, rep)
            batches[key].append((time.process_time() - start) / reps * 1e3)
    out: dict = {key: statistics.median(values) for key, values in batches.items()}
    out["blas"] = threadpool_info()
    print(json.dumps(out))


def _run_worker(root: Path, big: bool, reps: int, cycles: int) -> dict:
    env = {**os.environ, **ONE_THREAD, "PYTHONPATH": str(root)}
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", str(root)]
    argv += ["--reps", str(reps), "--cycles", str(cycles)] + (["--big"] if big else [])
    done = subprocess.run(argv, env=env, check=True, capture_output=True, text=True, cwd=root)
    return json.loads(done.stdout)


def policy_table(compare: Path | None, rounds: int, reps: int, cycles: int) -> None:
    """Per-policy ms per replication at 1× and 10× nodes (and ``compare``'s at 1×): medians
    over ``rounds`` fresh processes of each checkout, alternating; a ratio is the median
    over rounds of the ratio within a round (new / old: of the two processes run one after
    the other; 10× / 1×: within one process)."""
    ours: list[dict] = []
    theirs: list[dict] = []
    for round_ in range(rounds):
        # Alternate which goes first, so neither always runs on a warmer machine.
        order = [(ours, ROOT, True), (theirs, compare, False)] if compare else [(ours, ROOT, True)]
        for results, root, big in order[:: 1 if round_ % 2 == 0 else -1]:
            results.append(_run_worker(root, big, reps, cycles))
    for lib in ours[0]["blas"]:
        print(
            f"BLAS: {lib.get('internal_api')} {lib.get('version')} "
            f"kernel {lib.get('architecture')}, {lib.get('num_threads')} thread(s)"
        )

    labels = [key.split(" ", 1)[1] for key in ours[0] if key.startswith("1x ")]
    head = f"{'policy':10s} {'1x ms':>7s} {'10x ms':>7s} {'10x/1x':>6s}"
    print(head + (f" {'old ms':>7s} {'new/old':>7s}" if compare else ""))
    for label in labels:
        base = statistics.median(r[f"1x {label}"] for r in ours)
        big = statistics.median(r[f"10x {label}"] for r in ours)
        scaling = statistics.median(r[f"10x {label}"] / r[f"1x {label}"] for r in ours)
        line = f"{label:10s} {base:7.3f} {big:7.3f} {scaling:6.2f}"
        if compare:
            old = statistics.median(r[f"1x {label}"] for r in theirs)
            pairs = zip(ours, theirs, strict=True)
            ratio = statistics.median(a[f"1x {label}"] / b[f"1x {label}"] for a, b in pairs)
            line += f" {old:7.3f} {ratio:7.2f}"
        print(line)
    print(
        f"CPU ms per replication: medians of {rounds} processes per checkout, each the median"
        f" of {cycles} batches of {reps} replications per policy"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", type=Path, help="another ftsim checkout to compare with")
    parser.add_argument("--rounds", type=int, default=5, help="processes per checkout")
    parser.add_argument("--reps", type=int, default=20, help="replications per batch")
    parser.add_argument("--cycles", type=int, default=10, help="batches per policy and process")
    parser.add_argument("--table-only", action="store_true", help="only the per-policy table")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--big", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.big, args.reps, args.cycles)
        return
    if not args.table_only:
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
    policy_table(args.compare, args.rounds, args.reps, args.cycles)


if __name__ == "__main__":
    main()
