"""Time the acceptance sweep: prod50h, 6 policies × 10 checkpoint intervals × 10 replications.

Timing only (``--no-trainer``). So that one ``interval`` key applies to every policy, the
benchmark writes a copy of prod50h with six variants of ``full`` (synchronous saves, and
CheckFreq-style two-phase saves with several persist slowdowns and snapshot rates) and runs
``python -m ftsim sweep`` on it, end to end in a subprocess, with ``--jobs 1`` and
``--jobs 2``. It prints both wall times (seconds, including start-up) and checks that the
two runs.csv files are byte-identical.

    python benchmarks/sweep_speed.py [--jobs 1 2 4] [--quick]

``--quick`` (a smoke test, run by the tests): 2 intervals × 2 replications.
"""

from __future__ import annotations

import argparse
import os
import resource
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
    scenario: Path, out: Path, jobs: int, intervals: str = INTERVALS, reps: int = 10
) -> tuple[float, float]:
    """Wall and CPU seconds (all processes) of one ``ftsim sweep`` run with ``jobs`` workers."""
    command = [
        sys.executable, "-m", "ftsim", "sweep", str(scenario),
        "--grid", f"policies.*.interval={intervals}",
        "--reps", str(reps), "--jobs", str(jobs), "--no-trainer", "-q", "-o", str(out),
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 intervals x 2 reps")
    args = parser.parse_args()
    intervals, reps = ("30 min,1 h", 2) if args.quick else (INTERVALS, 10)
    n = len(intervals.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        scenario = scenario_file(tmp)
        runs = {}
        print(
            f"{len(POLICIES)} policies x {n} intervals x {reps} replications = "
            f"{len(POLICIES) * n * reps} replications"
        )
        print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        for jobs in args.jobs:
            wall, cpu = time_sweep(scenario, tmp / f"jobs{jobs}", jobs, intervals, reps)
            runs[jobs] = (tmp / f"jobs{jobs}" / "runs.csv").read_bytes()
            print(f"--jobs {jobs}: {wall:.2f} s wall, {cpu:.2f} s CPU")
        same = len(set(runs.values())) == 1
        print(f"runs.csv identical across job counts: {same}")
        if not same:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
