"""Check-N-Run on prod50h: write bandwidth, storage capacity, overhead and accuracy.

Runs ``python -m ftsim run scenarios/checknrun.yaml`` (or reads a finished run folder given
as argument) and prints, per policy, the overhead with its 95% t-interval, the write
bandwidth and storage capacity against full checkpoints, and the log-loss change with its
95% t-interval over the trained replications. Then, from the time model's closed forms
(a failure-free baseline cycle), how the two reductions depend on what the scenario
fixes: the row popularity, the interval, the baseline period and the bits, next to the
paper's 6–17× (write bandwidth) and 2.5–8× (capacity) on Facebook's models.

    python benchmarks/checknrun_report.py [RUN_FOLDER] [--quick]

``--quick`` (a smoke test: the tests run it so that the benchmark cannot rot) runs two
replications, one trained for 20 steps.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ftsim.experiments.stats import mean_ci
from ftsim.policies import catalog  # noqa: F401 (the kinds a scenario may name)
from ftsim.policies.inputs import PlanInputs
from ftsim.scenario.loader import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "checknrun.yaml"


QUICK = ["--reps", "2", "--set", "trainer.replications=1", "--set", "trainer.steps=20"]
"""``--quick``: options of ``ftsim run`` for a smoke run."""


def run(folder: Path | None, extra: list[str]) -> pd.DataFrame:
    if folder is not None:
        return pd.read_csv(folder / "runs.csv")
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        command = [sys.executable, "-m", "ftsim", "run", str(SCENARIO), "-q", "-o", out, *extra]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        print(f"python -m ftsim run scenarios/checknrun.yaml: {time.perf_counter() - start:.0f} s")
        return pd.read_csv(Path(out) / "runs.csv")


def results(runs: pd.DataFrame) -> None:
    """Per policy: overhead, write and capacity reductions, log-loss change."""
    scenario = load_scenario(SCENARIO)
    full_gb = PlanInputs.of(scenario).layout.total_bytes / 1e9
    runs = runs.copy()
    full = runs.kind == "full"
    runs.loc[full, "write_reduction"] = 1.0  # a full checkpoint against itself
    runs.loc[full, "storage_gb"] = full_gb  # full checkpoints keep the last one
    runs["capacity_reduction"] = full_gb / runs.storage_gb
    written_full = runs[runs.policy == "full"].saved_gb.mean()
    header = (
        f"{'policy':16s} {'overhead':>16s} {'write red.':>10s} {'written':>9s} "
        f"{'vs full':>7s} {'storage':>9s} {'capacity red.':>13s} {'logloss change':>22s}"
    )
    print(header)
    for policy, group in runs.groupby("policy", sort=False):
        mean, half, _ = mean_ci(group.overhead_frac)
        written = group.saved_gb.mean()
        if "logloss_delta" in group:  # a run with the trainer
            loss, loss_half, n = mean_ci(group.logloss_delta.dropna())
            change = f"{loss:+10.1e} ± {loss_half:.1e} (n={n})"
        else:
            change = f"{'- (not trained)':>22s}"
        print(
            f"{policy:16s} {100 * mean:7.2f}% ± {100 * half:4.2f}% "
            f"{group.write_reduction.mean():9.2f}× {written / 1e3:7.1f}TB "
            f"{written_full / written:6.2f}× {group.storage_gb.mean():7.0f}GB "
            f"{group.capacity_reduction.mean():12.2f}× {change}"
        )
    print(
        "write red.: what full checkpoints at the same points would write, over what was "
        "written (the paper's write-bandwidth reduction);\nwritten: bytes written in the run; "
        "vs full: full checkpoints at Daly's interval over that; storage: the largest set of "
        f"checkpoints kept for recovery\n(full: one checkpoint, {full_gb:.0f} GB); capacity "
        "red.: one full checkpoint over it."
    )


def cycle(overrides: list[str]) -> dict[str, float]:
    """A failure-free baseline cycle of policy 2 (one-shot) with these overrides: its write
    and capacity reductions and its mean share of rows per differential checkpoint."""
    scenario = load_scenario(SCENARIO, ["trainer=null", *overrides])
    params = scenario.policies[2]
    plan = params.plan(PlanInputs.of(scenario))
    kept = list(plan._cycle(plan.interval_s))
    dense = plan.layout.dense_bytes
    written = sum(sum(k.shard_bytes) for k in kept) + len(kept) * dense
    if params.differential == "one_shot":
        chains = [kept[:1]] + [[kept[0], k] for k in kept[1:]]
    else:
        chains = [kept[: i + 1] for i in range(len(kept))]
    stored = max(sum(sum(k.shard_bytes) for k in c) for c in chains) + dense
    diffs = [sum(k.rows) / plan.n_shards / plan.shard_rows for k in kept[1:]]
    return {
        "write": len(kept) * plan.full_bytes / written,
        "capacity": plan.full_bytes / stored,
        "rows": float(np.mean(diffs)) if diffs else 1.0,
    }


def sensitivity() -> None:
    print(
        "\nClosed forms, failure-free cycle (one-shot unless said; baseline every 4; "
        "30 min): write reduction / capacity reduction [mean share of rows per "
        "differential checkpoint]"
    )
    variants = {
        "fp32": [],
        "8-bit": ["policies.2.quantize_bits=8"],
        "4-bit": ["policies.2.quantize_bits=4"],
        "2-bit": ["policies.2.quantize_bits=2"],
    }
    cases = {
        "prod50h (Zipf 1.05, 30 min)": [],
        "interval 10 min": ["policies.2.interval=10 min"],
        "interval 1 h": ["policies.2.interval=1 h"],
        "Zipf 1.2": ["policies.2.popularity_exponent=1.2"],
        "Zipf 1.5": ["policies.2.popularity_exponent=1.5"],
        "10x rows per table": ["job.tables.0.rows=330_000_000"],
        "baseline every 2": ["policies.2.baseline_every=2"],
        "baseline every 8": ["policies.2.baseline_every=8"],
        "consecutive": ["policies.2.differential=consecutive"],
        "consecutive, every 8": [
            "policies.2.differential=consecutive",
            "policies.2.baseline_every=8",
        ],
    }
    print(f"{'':30s}" + "".join(f"{name:>24s}" for name in variants))
    for case, overrides in cases.items():
        cells = []
        for extra in variants.values():
            # the trainer's exponent is gone with the trainer: use the policy's fallback
            c = cycle([*overrides, *extra])
            cells.append(f"{c['write']:5.2f}× / {c['capacity']:4.2f}× [{c['rows']:.2f}]")
        print(f"{case:30s}" + "".join(f"{cell:>24s}" for cell in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, help="a finished run folder to read")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 replications")
    args = parser.parse_args()
    results(run(args.folder, QUICK if args.quick else []))
    sensitivity()


if __name__ == "__main__":
    main()
