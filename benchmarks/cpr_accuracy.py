"""Accuracy cost of CPR versus PLS, and of prioritized saving at equal saved bytes.

Runs (or reads) the ``scenarios/cpr_pls.yaml`` sweep — the checkpoint interval swept
through the target PLS for ``cpr``, ``cpr_mfu`` and ``cpr_ssu``, every replication training
the embedded model — and prints:

1. the sweep's wall time (when it runs it) and the trainer steps it took;
2. the least-squares line logloss_delta = slope · PLS + intercept (PLS measured on the
   trainer) over all vanilla-CPR replications, with R² and n, and the same fit over the
   points' means;
3. for each MFU/SSU point, its mean log-loss increase against vanilla CPR's at the same
   total saved bytes (CPR's mean curve over saved GB, linearly interpolated).

    python benchmarks/cpr_accuracy.py [--jobs N]  # runs the sweep (a few minutes)
    python benchmarks/cpr_accuracy.py RUN_DIR     # analyses an existing sweep
    python benchmarks/cpr_accuracy.py --quick     # smoke run: 2 replications of 20 steps

The sweep runs as many replications per point as the scenario trains (``trainer.
replications``), unless ``--reps`` says otherwise; other options go to ``ftsim sweep``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def fit(x: pd.Series, y: pd.Series) -> tuple[float, float, float]:
    """(slope, intercept, R²) of the least-squares line y = slope · x + intercept."""
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (slope * x + intercept)
    r2 = 1 - (residual**2).sum() / ((y - y.mean()) ** 2).sum()
    return float(slope), float(intercept), float(r2)


def equal_bytes(runs: pd.DataFrame) -> pd.DataFrame:
    """Per prioritized point: its mean logloss_delta and vanilla CPR's at the same bytes."""
    means = runs.groupby(["kind", "point"])[["saved_gb", "logloss_delta", "pls_measured"]].mean()
    cpr = means.loc["cpr"].sort_values("saved_gb")
    rows = []
    for kind in ("cpr_mfu", "cpr_ssu"):
        for point, row in means.loc[kind].iterrows():
            inside = cpr.saved_gb.min() <= row.saved_gb <= cpr.saved_gb.max()
            reference = np.interp(row.saved_gb, cpr.saved_gb, cpr.logloss_delta)
            rows.append(
                {
                    "kind": kind,
                    "point": point,
                    "saved_gb": row.saved_gb,
                    "pls_measured": row.pls_measured,
                    "logloss_delta": row.logloss_delta,
                    "cpr_at_same_bytes": reference if inside else np.nan,
                }
            )
    return pd.DataFrame(rows)


QUICK = ["--reps", "2", "--set", "trainer.steps=20"]
"""``--quick``: options of ``ftsim sweep`` for a smoke run (the tests run it)."""


def main() -> None:
    if "-h" in sys.argv[1:] or "--help" in sys.argv[1:]:
        print(__doc__)
        return
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        run_dir = Path(sys.argv[1])
    else:
        from ftsim.scenario.loader import load_scenario

        path = ROOT / "scenarios" / "cpr_pls.yaml"
        options = [o for o in sys.argv[1:] if o != "--quick"]
        if "--quick" in sys.argv[1:]:
            options += QUICK
        if "--reps" not in options:
            options += ["--reps", str(load_scenario(path).trainer.replications)]
        run_dir = Path(tempfile.mkdtemp()) / "cpr_pls"
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "ftsim", "sweep", str(path), "-o", str(run_dir), "-q",
             *options],
            check=True,
        )  # fmt: skip
        print(f"python -m ftsim sweep scenarios/cpr_pls.yaml: {time.perf_counter() - start:.1f} s")
    runs = pd.read_csv(run_dir / "runs.csv").dropna(subset=["logloss_delta"])
    first = runs.drop_duplicates(["point", "rep"])
    steps = first.trainer_steps.sum() + runs.trainer_own_steps.sum()
    print(f"trainer steps: {steps} for {first.trainer_steps.sum()} failure-free ones")
    cpr = runs[runs.kind == "cpr"]
    slope, intercept, r2 = fit(cpr.pls_measured, cpr.logloss_delta)
    print(
        f"vanilla CPR, n = {len(cpr)} replications ({cpr.point.nunique()} points): "
        f"logloss_delta = {slope:.4g} · PLS + {intercept:.3g}, R² = {r2:.3f}"
    )
    means = cpr.groupby("point")[["pls_measured", "logloss_delta"]].mean()
    slope, intercept, r2 = fit(means.pls_measured, means.logloss_delta)
    print(
        f"vanilla CPR, n = {len(means)} point means: "
        f"logloss_delta = {slope:.4g} · PLS + {intercept:.3g}, R² = {r2:.3f}"
    )
    table = equal_bytes(runs)
    with pd.option_context("display.float_format", "{:.4g}".format, "display.width", 120):
        print(table.to_string(index=False))
    compared = table.dropna()
    better = (compared.logloss_delta < compared.cpr_at_same_bytes).sum()
    print(f"prioritized below vanilla CPR at equal saved bytes: {better} of {len(compared)} points")


if __name__ == "__main__":
    main()
