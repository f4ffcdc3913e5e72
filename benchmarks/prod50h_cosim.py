"""prod50h with the embedded trainer: wall time, steps trained, peak memory, accuracy effect.

Runs ``python -m ftsim run scenarios/prod50h.yaml`` with ``--jobs 1`` and ``--jobs 2``
(target: at most 12 s with 2 jobs on 2 quiet cores), checks that both write the same
runs.csv, prints the BLAS (threadpoolctl) and the load average before each run, and
reports for each the wall and CPU time, the peak RSS of the largest process, and the
trainer steps: the failure-free run once per trained replication plus every policy's own
steps after its fork (policies whose recovery is exact train none). Then, per policy, the
mean paired log-loss increase over the trained replications with its 95% t-interval and t
statistic, next to the seed-to-seed spread of the failure-free log loss.

For each run also a timeline (seconds from the command's start): the serial start (the
interpreter, imports, planning, until the first task starts), each worker's tasks (wall
and CPU time each; ``r3`` is replication 3 with its policies, ``r20-29`` a batch of timing
replications), the time a worker was idle while the other still computed, and the serial
end (after the last task: merging, writing, exit). The command runs as ``python -m ftsim``
does, with ``ftsim.experiments.sweep.run_task`` wrapped to log each task (forked workers
inherit the wrapper).

    python benchmarks/prod50h_cosim.py [--jobs N ...] [--quick] [extra ftsim run options]

``--quick`` (a smoke test, run by the tests): 3 replications, 2 trained for 20 steps.
"""

from __future__ import annotations

import argparse
import json
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


LOGGED_COMMAND = """
import json, os, sys, time
log = sys.argv[1]
from ftsim.experiments import sweep
task = sweep.run_task
def logged(tasks):
    start, cpu = time.perf_counter(), time.process_time()
    try:
        return task(tasks)
    finally:
        key = tasks[0][1][0][0]
        entry = {"pid": os.getpid(), "start": start, "end": time.perf_counter(),
                 "cpu": time.process_time() - cpu, "reps": [key.start, key.stop]}
        with open(log, "a") as f:
            f.write(json.dumps(entry) + chr(10))
sweep.run_task = logged
from ftsim.cli import main
raise SystemExit(main(sys.argv[2:]))
"""
"""``python -m ftsim`` with every task's worker, times and replications logged (JSON lines)."""


def timed_run(out: Path, jobs: int, extra: list[str]) -> dict:
    """Run the scenario in a fresh process; its wall and CPU seconds, peak RSS (MiB), and
    timeline (:func:`timeline`)."""
    log = out.parent / f"{out.name}.tasks.jsonl"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", LOGGED_COMMAND, str(log), "run",
         str(ROOT / "scenarios" / "prod50h.yaml"), "-q", "-o", str(out), "--jobs", str(jobs),
         *extra],
        check=True,
    )  # fmt: skip
    end = time.perf_counter()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    tasks = [json.loads(line) for line in log.read_text().splitlines()]
    return {
        "wall": end - start,
        "cpu": cpu,
        "rss_mib": after.ru_maxrss / 1024,
        "timeline": timeline(tasks, start, end),
    }


def timeline(tasks: list[dict], start: float, end: float) -> list[str]:
    """Lines describing where the command's wall time went (see the module docstring):
    ``tasks`` as logged by :data:`LOGGED_COMMAND`, ``start`` and ``end`` of the command on
    the same clock."""
    first = min(t["start"] for t in tasks)
    last = max(t["end"] for t in tasks)
    lines = [f"serial start (interpreter, imports, planning): {first - start:.2f} s"]
    for n, pid in enumerate(sorted({t["pid"] for t in tasks}, key=str)):
        mine = sorted((t for t in tasks if t["pid"] == pid), key=lambda t: t["start"])
        cpu = sum(t["cpu"] for t in mine)
        done = mine[-1]["end"]
        cells = " ".join(
            f"r{t['reps'][0]}" + (f"-{t['reps'][1] - 1}" if t["reps"][1] - t["reps"][0] > 1 else "")
            + f":{t['end'] - t['start']:.2f}/{t['cpu']:.2f}"
            for t in mine
        )  # fmt: skip
        lines.append(
            f"worker {n}: {len(mine)} tasks {mine[0]['start'] - start:.2f}-{done - start:.2f} s, "
            f"CPU {cpu:.2f} s, idle at the end {last - done:.2f} s; task wall/CPU s: {cells}"
        )
    lines.append(f"serial end (merge, writing, exit): {end - last:.2f} s")
    return lines


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
            for line in timing["timeline"]:
                print("   ", line)
    print(f"runs.csv identical across job counts: {len(set(outputs.values())) == 1}")
    if "logloss_delta" not in runs:  # e.g. --no-trainer: no replication trained the model
        print("no trained replication: no trainer steps or accuracy to report")
        return
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
