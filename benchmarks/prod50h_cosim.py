"""prod50h with the embedded trainer: wall time, steps trained, peak memory, accuracy effect.

Runs ``python -m ftsim run scenarios/prod50h.yaml`` with ``--jobs 1`` and ``--jobs 2``
(target: at most 12 s with 2 jobs on 2 quiet cores), checks that both write the same
runs.csv, prints the BLAS (threadpoolctl) and the load average before each run, and
reports for each the wall and CPU time, the peak RSS of the largest process, and the
trainer steps: the failure-free run once per trained replication plus every policy's own
steps after its fork (policies whose recovery is exact train none). Then, per policy, the
mean paired log-loss increase over the trained replications with its 95% t-interval and t
statistic, next to the seed-to-seed spread of the failure-free log loss.

    python benchmarks/prod50h_cosim.py [--jobs N ...] [--quick] [extra ftsim run options]

``--quick`` (a smoke test, run by the tests): 3 replications, 2 trained for 20 steps.
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

import pandas as pd

from ftsim.experiments.stats import mean_ci

ROOT = Path(__file__).resolve().parents[1]


def blas_line() -> str:
    """The BLAS NumPy loads, with its kernel (the trained columns depend on it)."""
    import numpy  # noqa: F401 (loads the BLAS)
    from threadpoolctl import threadpool_info

    return "; ".join(
        f"{i['internal_api']} {i['version']} kernel {i.get('architecture')}"
        for i in threadpool_info()
        if i["user_api"] == "blas"
    )


def timed_run(out: Path, jobs: int, extra: list[str]) -> dict:
    """Run the scenario in a fresh process; its wall and CPU seconds and peak RSS (MiB)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "ftsim", "run", str(ROOT / "scenarios" / "prod50h.yaml"),
         "-q", "-o", str(out), "--jobs", str(jobs), *extra],
        check=True,
    )  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"wall": wall, "cpu": cpu, "rss_mib": after.ru_maxrss / 1024}


def steps_trained(runs: pd.DataFrame) -> tuple[int, int]:
    """(steps trained, failure-free steps) over the trained replications."""
    trained = runs.dropna(subset=["logloss_delta"])
    baseline = int(trained.drop_duplicates("rep")["trainer_steps"].sum())
    return baseline + int(trained["trainer_own_steps"].sum()), baseline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 short replications")
    args, extra = parser.parse_known_args()
    if args.quick:
        extra += ["--reps", "3", "--set", "trainer.replications=2", "--set", "trainer.steps=20"]
    outputs = {}
    print("BLAS:", blas_line())
    with tempfile.TemporaryDirectory() as folder:
        for jobs in args.jobs:
            out = Path(folder) / f"jobs{jobs}"
            load = os.getloadavg()[0]
            timing = timed_run(out, jobs, extra)
            outputs[jobs] = (out / "runs.csv").read_bytes()
            runs = pd.read_csv(out / "runs.csv")
            print(
                f"--jobs {jobs}: {timing['wall']:.1f} s wall (target with 2 jobs: 12 s), "
                f"{timing['cpu']:.1f} s CPU, peak RSS {timing['rss_mib']:.0f} MiB "
                f"(load average before: {load:.2f})"
            )
    print(f"runs.csv identical across job counts: {len(set(outputs.values())) == 1}")
    steps, baseline = steps_trained(runs)
    trained = runs.dropna(subset=["logloss_delta"])
    n_trained = trained["rep"].nunique()
    print(
        f"{n_trained} trained replications: {steps} trainer steps for {baseline} failure-free "
        f"ones ({steps / baseline:.2f}x)"
    )
    base = trained.drop_duplicates("rep").baseline_logloss
    print(
        f"seed noise: failure-free log loss {base.mean():.4f} ± {base.std():.4f} (std) "
        f"over {len(base)} replications"
    )
    for policy, group in trained.groupby("policy", sort=False):
        mean, half, n = mean_ci(group.logloss_delta)
        std = group.logloss_delta.std()
        t = mean / (std / n**0.5) if std > 0 else float("nan")
        overhead = runs[runs.policy == policy].overhead_frac.mean()
        own = group.trainer_own_steps.mean() / group.trainer_steps.mean()
        print(
            f"{policy:8s} logloss_delta {mean:+.2e} ± {half:.1e} (95% CI, n={n}), t = {t:5.1f}, "
            f"PLS measured {group.pls_measured.mean():.4f}, overhead {100 * overhead:.2f}%, "
            f"own steps {100 * own:.0f}% of the run"
        )


if __name__ == "__main__":
    main()
