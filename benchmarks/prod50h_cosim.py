"""prod50h with the embedded trainer: wall time of the whole command and the accuracy effect.

Times ``python -m ftsim run scenarios/prod50h.yaml`` (target: under 60 s on 2 cores), then
shows that the accuracy cost is measurable above seed noise: per policy, the mean paired
log-loss increase over the trained replications, its 95% t-interval and t statistic, next
to the seed-to-seed spread of the failure-free log loss.

    python benchmarks/prod50h_cosim.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from ftsim.experiments.tdist import mean_ci

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "ftsim", "run", str(ROOT / "scenarios" / "prod50h.yaml"),
             "-q", "-o", out],
            check=True,
        )  # fmt: skip
        elapsed = time.perf_counter() - start
        runs = pd.read_csv(Path(out) / "runs.csv")
    print(f"python -m ftsim run scenarios/prod50h.yaml: {elapsed:.1f} s (target < 60 s)")
    trained = runs.dropna(subset=["logloss_delta"])
    baseline = trained.drop_duplicates("rep").baseline_logloss
    print(
        f"seed noise: failure-free log loss {baseline.mean():.4f} ± {baseline.std():.4f} (std) "
        f"over {len(baseline)} replications"
    )
    for policy, group in trained.groupby("policy", sort=False):
        mean, half, n = mean_ci(group.logloss_delta)
        std = group.logloss_delta.std()
        t = mean / (std / n**0.5) if std > 0 else float("nan")
        overhead = runs[runs.policy == policy].overhead_frac.mean()
        print(
            f"{policy:8s} logloss_delta {mean:+.2e} ± {half:.1e} (95% CI, n={n}), t = {t:5.1f}, "
            f"PLS {group.pls.mean():.4f}, overhead {100 * overhead:.2f}%"
        )


if __name__ == "__main__":
    main()
