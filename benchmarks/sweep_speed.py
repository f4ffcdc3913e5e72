"""Time the acceptance sweep: prod50h, 6 policies × 10 checkpoint intervals × 10 replications.

Timing only (``--no-trainer``). So that one ``interval`` key applies to every policy, the
benchmark writes a copy of prod50h with six variants of ``full`` (synchronous saves, and
CheckFreq-style two-phase saves with several persist slowdowns and snapshot rates) and runs
``python -m ftsim sweep`` on it, end to end in a subprocess, with ``--jobs 1`` and
``--jobs 2``. It prints the wall and CPU seconds (all processes, including start-up) of
each, the medians over ``--rounds`` rounds (the job counts, and with ``--compare DIR``
this checkout and another, alternating within each round, so that all see the same load;
the load average is printed with each round), the speed-up of each job count over the
first, and checks that every runs.csv is byte-identical.

    python benchmarks/sweep_speed.py [--jobs 1 2 4] [--rounds 5] [--compare DIR] [--quick]

``--compare DIR``: another checkout of ftsim (e.g. ``git worktree add --detach /tmp/before
<commit>``), run with its own ``.venv`` if it has one, else with this interpreter.
``--cached-bytecode``: the runs read compiled modules from a cache made by an untimed run
of each checkout first (``PYTHONPYCACHEPREFIX``, a temporary folder), as an installed
ftsim does, where with ``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__`` in the
checkout every run compiles ftsim's modules (some 0.07 s of start-up).
``--quick`` (a smoke test, run by the tests): 2 intervals × 2 replications, one round.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
INTERVALS = "10 min,15 min,20 min,30 min,45 min,1 h,1.5 h,2 h,3 h,4 h"
POLICIES = [
    {"kind": "full", "name": "full"},
    {"kind": "full", "name": "checkfreq", "save_mode": "checkfreq"},
    {"kind": "full", "name": "checkfreq_2pct", "save_mode": "checkfreq", "persist_slowdown": 0.02},
    {"kind": "full", "name": "checkfreq_5pct", "save_mode": "checkfreq", "persist_slowdown": 0.05},
    {"kind": "full", "name": "checkfreq_10pct", "save_mode": "checkfreq", "persist_slowdown": 0.1},
    {
        "kind": "full",
        "name": "checkfreq_slowsnap",
        "save_mode": "checkfreq",
        "snapshot_bandwidth": "1 GB/s",
    },
]


def scenario_file(folder: Path) -> Path:
    """prod50h with the six policies, written to ``folder``."""
    data = yaml.safe_load((ROOT / "scenarios" / "prod50h.yaml").read_text())
    data["policies"] = POLICIES
    path = folder / "prod50h_6policies.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def time_sweep(
    scenario: Path,
    out: Path,
    jobs: int,
    intervals: str = INTERVALS,
    reps: int = 10,
    root: Path = ROOT,
    env: dict[str, str] | None = None,
) -> tuple[float, float]:
    """Wall and CPU seconds (all processes) of one ``ftsim sweep`` run with ``jobs`` workers,
    of the checkout ``root`` (in the environment ``env``, default this one's)."""
    command = [
        _python(root), "-m", "ftsim", "sweep", str(scenario),
        "--grid", f"policies.*.interval={intervals}",
        "--reps", str(reps), "--jobs", str(jobs), "--no-trainer", "-q", "-o", str(out),
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=root, env=env, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _python(root: Path) -> str:
    """The interpreter of the checkout ``root`` (its ``.venv``), else this one."""
    venv = root / ".venv" / "bin" / "python"
    return str(venv) if root != ROOT and venv.exists() else sys.executable


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every run (medians)")
    parser.add_argument("--compare", type=Path, help="another checkout, run alternately")
    parser.add_argument(
        "--cached-bytecode", action="store_true", help="compile once, as an installed ftsim"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 intervals x 2 reps")
    args = parser.parse_args()
    intervals, reps = ("30 min,1 h", 2) if args.quick else (INTERVALS, 10)
    rounds = 1 if args.quick else args.rounds
    trees = {"new": ROOT} | ({"old": args.compare.resolve()} if args.compare else {})
    n = len(intervals.split(","))
    print(
        f"{len(POLICIES)} policies x {n} intervals x {reps} replications = "
        f"{len(POLICIES) * n * reps} replications"
    )
    print("checkouts: " + ", ".join(f"{name} {root}" for name, root in trees.items()))
    env = None
    if args.cached_bytecode:
        print("bytecode: compiled by an untimed run of each checkout, then read from a cache")
    elif sys.flags.dont_write_bytecode:
        print("bytecode: PYTHONDONTWRITEBYTECODE is set: each run compiles what it imports")
    times: dict[tuple[str, int], list[tuple[float, float]]] = {}
    runs = set()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        scenario = scenario_file(tmp)
        if args.cached_bytecode:
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
            for name, root in trees.items():
                time_sweep(scenario, tmp / f"warm-{name}", 2, "1 h", 1, root, env)
        for round_ in range(rounds):
            cells = []
            load = os.getloadavg()[0]
            for name, root in trees.items():
                for jobs in args.jobs:
                    out = tmp / f"{name}-jobs{jobs}-{round_}"
                    wall, cpu = time_sweep(scenario, out, jobs, intervals, reps, root, env)
                    times.setdefault((name, jobs), []).append((wall, cpu))
                    runs.add((out / "runs.csv").read_bytes())
                    cells.append(f"{name} --jobs {jobs} {wall:.2f} s ({cpu:.2f} s CPU)")
            print(
                f"round {round_ + 1}, load {load:.1f} on {os.cpu_count()} CPUs: " + ", ".join(cells)
            )
    print(f"medians over {rounds} round(s), load average now {os.getloadavg()[0]:.1f}:")
    for name in trees:
        walls = {j: statistics.median(w for w, _ in times[name, j]) for j in args.jobs}
        for jobs in args.jobs:
            cpu = statistics.median(c for _, c in times[name, jobs])
            line = f"{name} --jobs {jobs}: {walls[jobs]:.2f} s wall, {cpu:.2f} s CPU"
            if jobs != args.jobs[0]:
                line += (
                    f", {walls[args.jobs[0]] / walls[jobs]:.2f}x the speed of --jobs {args.jobs[0]}"
                )
            print(line)
    print(f"runs.csv identical across job counts and checkouts: {len(runs) == 1}")
    if len(runs) != 1:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
