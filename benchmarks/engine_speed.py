"""Engine speed on prod50h, timing only (``--no-trainer``).

Reports (1) the wall time of the whole command ``python -m ftsim run scenarios/prod50h.yaml
--reps 1`` (median of several runs, as a user would see it), (2) replications per second
in process, (3) that halving the iteration time leaves the simulator's cost unchanged
(phase-level model: the cost grows with events, not iterations), and (4) the cost per
replication of every policy, on prod50h and on a cluster with 10× the nodes (same job,
same failures), or with ``--scale 100x`` 100× the nodes and the embeddings ×100 (the same
bytes per PS; issue 26: every policy ≤ 2× its 1× cost): with the flow-level network the
cost must stay event-driven.

Targets: < 1 s for the whole command, < 5 ms per replication (issue 2); every policy's
cost ≤ 1.5× its cost before the network model, and 10× nodes ≤ 1.5× the base cost
(issue 11).

The per-policy table (4) is CPU ms per replication, measured in worker processes on one
BLAS thread that each run every policy once per replication, after an untimed warm-up, in
batches of ``--reps`` replications. ``--compare DIR`` adds another checkout of ftsim (e.g.
``git worktree add /tmp/before f48ff0e``, the commit before the network model), run on its
own ``scenarios/prod50h.yaml`` at 1× nodes: its worker runs each batch right after (or
before) this checkout's, so the ratio new / old compares the same replications a few
milliseconds apart, on the same machine; likewise scaled / 1×. Figures and ratios are
medians over batches (``--cycles`` per policy and round, ``--rounds`` pairs of fresh
workers, both pinned to processor ``--cpu`` with ``taskset``); the BLAS library the
workers use is printed (threadpoolctl). CPU time, one processor, medians and pairs keep
the figures steady on a shared machine. Each checkout's replications are made as its runs
make them: without the records a run leaves out (timeline, model events) and under the
garbage collector's setting of its runs, where it has them. The table gives SimPy events
per replication, as SimPy numbers them (every event scheduled, stale wake-ups included: a
change that keeps every result may still need fewer, e.g. ECRM's range switches no longer
re-plan a compute just started; compare checkouts with different counts by their ms per
replication), and µs per event, with SimPy's own timeout loop as the floor; (5) splits each
policy's replication into drawing its failures, building and running it.

    python benchmarks/engine_speed.py
    python benchmarks/engine_speed.py --table-only --compare /tmp/before
    python benchmarks/engine_speed.py --table-only --scale 100x
    python benchmarks/engine_speed.py --quick   # smoke run (the tests run it): tiny table
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
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
HUGE = ["cluster.trainers=2000", "cluster.emb_ps=1800", "job.tables.0.rows=3300000000"]
"""100× the nodes of prod50h with the embeddings scaled ×100 (the same bytes per PS)."""
WARM_UP = 10
"""Replications of every policy run untimed first in each worker (numbered after the timed
ones)."""
ONE_THREAD = {
    name: "1"
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")
}


def _engine():
    """``(load_scenario, replicator)`` of whichever ftsim is importable: ``replicator(scenario,
    indices)`` returns a function that runs replication ``rep`` of those policies (as a run
    does: one draw of the replication's failures for all of them, where the checkout shares
    it) and returns the finished simulations. This layout prepares each policy once (as a
    run or a sweep task does), and records neither timeline nor model events where the
    checkout can leave them out (as a run does in every replication but the one whose
    timeline it keeps, when it does not train the model); commits before it (for
    ``--compare``) build everything per replication."""
    try:
        from ftsim.experiments.prepare import prepare
        from ftsim.scenario.loader import load_scenario
    except ImportError:
        load_scenario, simulate = _engine_before_prepare()

        def per_replication(scenario, indices):
            return lambda rep: [simulate(scenario, index, rep) for index in indices]

        return load_scenario, per_replication
    try:
        from ftsim.sim.failures import FailureDraws
    except ImportError:  # before the failures of a replication were shared
        FailureDraws = None  # noqa: N806

    def prepared(scenario, indices):
        policies = [prepare(scenario, index) for index in indices]
        if FailureDraws is None:
            return lambda rep: [policy.replicate(rep).run() for policy in policies]
        records = {}
        if "timeline" in inspect.signature(policies[0].replicate).parameters:
            records = {"timeline": False, "model_events": False}  # as a run's replications

        def replication(rep):
            failures = FailureDraws(scenario, rep)
            return [
                policy.replicate(rep, failures=failures, **records).run() for policy in policies
            ]

        return replication

    return load_scenario, prepared


def _collector():
    """The garbage collector's setting of the checkout's runs while they simulate
    (``replication_gc``; Python's defaults before it), entered around each batch."""
    try:
        from ftsim.experiments.runner import replication_gc
    except ImportError:
        return contextlib.nullcontext()
    return replication_gc()


def events_of(sim) -> int:
    """SimPy events a finished simulation scheduled (SimPy numbers them in order)."""
    return next(sim.env._eid)


def floor_events(n: int = 1000) -> int:
    """The floor: one SimPy process waiting on ``n`` timeouts in turn (SimPy's own loop,
    nothing of ftsim); returns the events scheduled."""
    import simpy

    def waits(env):
        for _ in range(n):
            yield env.timeout(1.0)

    env = simpy.Environment()
    env.process(waits(env))
    env.run()
    return next(env._eid)


def _engine_before_prepare():
    """``(load_scenario, simulate)`` of commits before the prepare step."""
    try:
        from ftsim.experiments.runner import simulate
        from ftsim.scenario.loader import load_scenario
    except ImportError:
        return _engine_before_catalog()
    return load_scenario, simulate


def _engine_before_catalog():
    """The engine of commits before the policy catalog (``simulate`` in the engine)."""
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
    load_scenario, replicator = _engine()
    scenario = load_scenario(PROD, [*overrides, "trainer.enabled=false"])
    simulate = replicator(scenario, [0])
    simulate(0)  # warm-up
    batches = []
    for batch in range(5):
        start = time.perf_counter()
        with _collector():
            for rep in range(reps // 5):
                (sim,) = simulate(batch * reps + rep)
        batches.append((time.perf_counter() - start) / (reps // 5) * 1e3)
    return statistics.median(batches), events_of(sim)


def worker(root: Path, big: bool) -> None:
    """Serve batches of replications of ``root``'s prod50h (and with 10× and 100× nodes if
    ``big``) on standard input/output: first a JSON line with the run keys (``"1x full"``, …, and
    ``"1x all"``: every policy of a replication in turn, as a run simulates them) and the
    BLAS libraries loaded, then for each line ``KEY FIRST COUNT`` a line ``MS EVENTS``: CPU
    ms and SimPy events per replication of replications FIRST … FIRST + COUNT − 1 of that
    run. Key ``floor`` runs COUNT × 2 SimPy timeout loops of 1,000 events instead (SimPy's
    own cost per event, beside the others on the same processor)."""
    from threadpoolctl import threadpool_info

    load_scenario, replicator = _engine()
    path = root / "scenarios" / "prod50h.yaml"
    scenarios = {"1x": load_scenario(path, ["trainer.enabled=false"])}
    if big:
        scenarios["10x"] = load_scenario(path, [*BIG, "trainer.enabled=false"])
        scenarios["100x"] = load_scenario(path, [*HUGE, "trainer.enabled=false"])
    runs = {
        f"{scale} {policy.label}": replicator(scenario, [index])
        for scale, scenario in scenarios.items()
        for index, policy in enumerate(scenario.policies)
    }
    one_x = scenarios["1x"]
    runs["1x all"] = replicator(one_x, list(range(len(one_x.policies))))
    for simulate in runs.values():  # warm-up: allocator and caches
        for rep in range(WARM_UP):
            simulate(10**6 + rep)
    print(json.dumps({"runs": list(runs), "blas": threadpool_info()}), flush=True)
    for line in sys.stdin:
        scale, label, first, count = line.split()
        reps = range(int(first), int(first) + int(count))
        if scale == "floor":
            start = time.process_time()
            events = sum(floor_events() for _ in range(2 * len(reps)))
        else:
            simulate = runs[f"{scale} {label}"]
            start = time.process_time()
            with _collector():
                events = sum(events_of(sim) for rep in reps for sim in simulate(rep))
        cpu_ms = (time.process_time() - start) * 1e3
        print(cpu_ms / len(reps), events / len(reps), flush=True)


class _Worker:
    """A worker process (:func:`worker`) of one checkout, kept for a round, on processor
    ``cpu`` (the workers being compared share one, so they see the same load)."""

    def __init__(self, root: Path, big: bool, cpu: int):
        env = {**os.environ, **ONE_THREAD, "PYTHONPATH": str(root)}
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker", str(root)]
        self.process = subprocess.Popen(
            ["taskset", "--cpu-list", str(cpu), *argv, *(["--big"] if big else [])],
            env=env,
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.info = json.loads(self.process.stdout.readline())

    def batch(self, key: str, first: int, count: int) -> tuple[float, float]:
        """(CPU ms, SimPy events) per replication of a batch (see :func:`worker`)."""
        self.process.stdin.write(f"{key} {first} {count}\n")
        self.process.stdin.flush()
        ms, events = self.process.stdout.readline().split()
        return float(ms), float(events)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def policy_table(
    compare: Path | None, rounds: int, reps: int, cycles: int, cpu: int, scale: str = "10x"
) -> dict[str, dict[str, float]]:
    """Per-policy CPU ms per replication at 1× and ``scale`` (``10x``: 10× the nodes;
    ``100x``: 100× with the embeddings ×100) nodes, SimPy events per replication
    and µs per event, ``all`` (every policy of a replication, as a run simulates them) against
    SimPy's own timeout loop, and ``compare``'s figures at 1×; returns the medians by row.

    Each round starts a worker of this checkout (and one of ``compare``) and runs
    ``cycles`` times, policy by policy, a batch of the next ``reps`` replications in each
    worker and scale, one right after the other (who goes first alternates), so that a
    ratio compares batches of the same replications run a few milliseconds apart. Figures
    are medians over all batches; ratios (new / old, scaled / 1×, per event / floor's per
    event) medians of the per-batch ratios."""
    batches: dict[str, list[float]] = {}
    events: dict[str, float] = {}
    ratios: dict[str, list[float]] = {}
    blas = None
    for round_ in range(rounds):
        ours = _Worker(ROOT, big=True, cpu=cpu)
        theirs = _Worker(compare, big=False, cpu=cpu) if compare else None
        blas = blas or ours.info["blas"]
        labels = [key.split(" ", 1)[1] for key in ours.info["runs"] if key.startswith("1x ")]
        for cycle in range(cycles):
            first = (round_ * cycles + cycle) * reps
            for label in labels:
                jobs = [("1x", ours)] + ([(scale, ours)] if label != "all" else [])
                jobs += [("old", theirs)] if theirs else []
                jobs += [("floor", ours)] if label == "all" else []
                if (cycle + round_) % 2:
                    jobs.reverse()
                got = {}
                for name, who in jobs:
                    size = "1x" if name == "old" else name
                    ms, n = who.batch(f"{size} {label}", first, reps)
                    got[name] = ms / n * 1e3  # µs per event
                    batches.setdefault(f"{name} {label}", []).append(ms)
                    events[f"{name} {label}"] = n
                if scale in got:
                    ratios.setdefault(f"{scale} {label}", []).append(
                        batches[f"{scale} {label}"][-1] / batches[f"1x {label}"][-1]
                    )
                if theirs:
                    ratios.setdefault(f"old {label}", []).append(
                        batches[f"1x {label}"][-1] / batches[f"old {label}"][-1]
                    )
                if "floor" in got:
                    ratios.setdefault("floor all", []).append(got["1x"] / got["floor"])
                    if theirs:
                        ratios.setdefault("floor old", []).append(got["old"] / got["floor"])
        ours.close()
        if theirs:
            theirs.close()
    for lib in blas:
        print(
            f"BLAS: {lib.get('internal_api')} {lib.get('version')} "
            f"kernel {lib.get('architecture')}, {lib.get('num_threads')} thread(s)"
        )
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    head = f"{'policy':10s} {'1x ms':>7s} {'events':>6s} {'us/ev':>6s}"
    head += f" {scale + ' ms':>7s} {'events':>6s} {scale + '/1x':>7s}"
    print(head + (f" {'old ms':>7s} {'old ev':>6s} {'new/old':>7s}" if compare else ""))
    medians: dict[str, dict[str, float]] = {}
    for label in labels:
        ms = statistics.median(batches[f"1x {label}"])
        row = {"ms": ms, "events": events[f"1x {label}"]}
        row["us_per_event"] = ms / row["events"] * 1e3
        line = f"{label:10s} {ms:7.3f} {row['events']:6.0f} {row['us_per_event']:6.2f}"
        if f"{scale} {label}" in batches:
            row["ms_scaled"] = statistics.median(batches[f"{scale} {label}"])
            row["events_scaled"] = events[f"{scale} {label}"]
            row["ratio_scaled"] = statistics.median(ratios[f"{scale} {label}"])
            line += f" {row['ms_scaled']:7.3f} {row['events_scaled']:6.0f}"
            line += f" {row['ratio_scaled']:7.2f}"
        else:
            line += f" {'':7s} {'':6s} {'':7s}"
        if compare:
            row["old_ms"] = statistics.median(batches[f"old {label}"])
            row["old_events"] = events[f"old {label}"]
            row["new_over_old"] = statistics.median(ratios[f"old {label}"])
            line += f" {row['old_ms']:7.3f} {row['old_events']:6.0f} {row['new_over_old']:7.2f}"
        medians[label] = row
        print(line)
    floor_us = statistics.median(batches["floor all"]) / events["floor all"] * 1e3
    medians["floor"] = {"us_per_event": floor_us, "ratio": statistics.median(ratios["floor all"])}
    print(
        f"SimPy's timeout loop: {floor_us:.3f} us per event; all 6 policies per event: "
        f"{medians['floor']['ratio']:.1f}x that"
        + (f" (old: {statistics.median(ratios['floor old']):.1f}x)" if compare else "")
    )
    if compare:
        medians["floor"]["old_ratio"] = statistics.median(ratios["floor old"])
    print(
        f"CPU ms per replication: medians of {rounds} rounds × {cycles} batches of {reps}"
        " replications per policy (each replication once per round and checkout); all: "
        "every policy of a replication in turn, sharing its failure draws as a run does"
    )
    return medians


def setup_split(reps: int) -> dict[str, tuple[float, float, float]]:
    """CPU µs per replication of each prod50h policy of this checkout in three parts, as a
    run makes it: drawing the replication's failures (a run draws them once per replication
    for all its policies; each per-policy row of the table above includes them), building
    the simulation, running it (medians over ``reps`` replications, after a warm-up).
    Returns them by policy and prints them."""
    from ftsim.experiments.prepare import prepare
    from ftsim.scenario.loader import load_scenario

    scenario = load_scenario(PROD, ["trainer.enabled=false"])
    print(f"{'policy':10s} {'draws us':>8s} {'build us':>8s} {'run us':>8s}  (CPU, this checkout)")
    split = {}
    for index, params in enumerate(scenario.policies):
        with _collector():
            split[params.label] = _split(scenario, prepare(scenario, index), reps)
        print(f"{params.label:10s} " + " ".join(f"{us:8.1f}" for us in split[params.label]))
    return split


def _split(scenario, policy, reps: int) -> tuple[float, float, float]:
    """:func:`setup_split` of one prepared policy: the medians of its three parts, µs."""
    from ftsim.sim.failures import FailureDraws

    horizon_s = scenario.job.work_s * scenario.run.max_wall_factor
    clock = time.process_time
    parts: tuple[list, list, list] = ([], [], [])
    for rep in range(WARM_UP + reps):
        start = clock()
        failures = FailureDraws(scenario, rep)
        drawn = 0  # every failure the run could reach (it would draw them as it goes)
        while (failure := failures.get(drawn)) is not None and failure.time_s <= horizon_s:
            drawn += 1
        drew = clock()
        sim = policy.replicate(rep, failures=failures, timeline=False, model_events=False)
        built = clock()
        sim.run()
        ran = clock()
        if rep >= WARM_UP:
            times = (drew - start, built - drew, ran - built)
            for part, seconds in zip(parts, times, strict=True):
                part.append(seconds * 1e6)
    return tuple(statistics.median(part) for part in parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", type=Path, help="another ftsim checkout to compare with")
    parser.add_argument("--rounds", type=int, default=3, help="worker processes per checkout")
    parser.add_argument("--reps", type=int, default=20, help="replications per batch")
    parser.add_argument("--cycles", type=int, default=10, help="batches per policy and round")
    parser.add_argument("--cpu", type=int, default=0, help="processor the workers share")
    parser.add_argument("--table-only", action="store_true", help="only the per-policy table")
    parser.add_argument(
        "--scale",
        choices=("10x", "100x"),
        default="10x",
        help="the table's larger cluster: 10x the nodes, or 100x with the embeddings x100",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: the table from 1 batch of 2 replications"
    )
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--big", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.table_only, args.rounds, args.cycles, args.reps = True, 1, 1, 2
    if args.worker:
        worker(args.worker, args.big)
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
    policy_table(args.compare, args.rounds, args.reps, args.cycles, args.cpu, args.scale)
    setup_split(2 if args.quick else 200)


if __name__ == "__main__":
    main()
