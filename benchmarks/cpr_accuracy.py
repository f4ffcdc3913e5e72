"""Accuracy cost of CPR versus PLS, and of prioritized saving at equal saved bytes.

Runs (or reads) the ``scenarios/cpr_pls.yaml`` sweep — the checkpoint interval swept
through the target PLS for ``cpr``, ``cpr_mfu`` and ``cpr_ssu``, every replication training
the embedded model — and prints:

1. the least-squares line logloss_delta = slope · PLS + intercept over all vanilla-CPR
   replications, with R²;
2. for each MFU/SSU point, its mean log-loss increase against vanilla CPR's at the same
   total saved bytes (CPR's mean curve over saved GB, linearly interpolated).

    python benchmarks/cpr_accuracy.py            # runs the sweep (several minutes)
    python benchmarks/cpr_accuracy.py RUN_DIR    # analyses an existing sweep
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def fit(runs: pd.DataFrame) -> tuple[float, float, float]:
    """(slope, intercept, R²) of logloss_delta on measured PLS for vanilla CPR."""
    cpr = runs[runs.kind == "cpr"]
    slope, intercept = np.polyfit(cpr.pls, cpr.logloss_delta, 1)
    residual = cpr.logloss_delta - (slope * cpr.pls + intercept)
    r2 = 1 - (residual**2).sum() / ((cpr.logloss_delta - cpr.logloss_delta.mean()) ** 2).sum()
    return float(slope), float(intercept), float(r2)


def equal_bytes(runs: pd.DataFrame) -> pd.DataFrame:
    """Per prioritized point: its mean logloss_delta and vanilla CPR's at the same bytes."""
    means = runs.groupby(["kind", "point"])[["saved_gb", "logloss_delta", "pls"]].mean()
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
                    "pls": row.pls,
                    "logloss_delta": row.logloss_delta,
                    "cpr_at_same_bytes": reference if inside else np.nan,
                }
            )
    return pd.DataFrame(rows)


def main() -> None:
    if len(sys.argv) > 1:
        run_dir = Path(sys.argv[1])
    else:
        run_dir = Path(tempfile.mkdtemp()) / "cpr_pls"
        subprocess.run(
            [sys.executable, "-m", "ftsim", "sweep", str(ROOT / "scenarios" / "cpr_pls.yaml"),
             "-o", str(run_dir), "-q"],
            check=True,
        )  # fmt: skip
    runs = pd.read_csv(run_dir / "runs.csv")
    slope, intercept, r2 = fit(runs)
    n = int((runs.kind == "cpr").sum())
    print(
        f"vanilla CPR, n = {n}: logloss_delta = {slope:.4g} · PLS + {intercept:.3g}, R² = {r2:.3f}"
    )
    table = equal_bytes(runs)
    with pd.option_context("display.float_format", "{:.4g}".format, "display.width", 120):
        print(table.to_string(index=False))
    compared = table.dropna()
    better = (compared.logloss_delta < compared.cpr_at_same_bytes).sum()
    print(f"prioritized below vanilla CPR at equal saved bytes: {better} of {len(compared)} points")


if __name__ == "__main__":
    main()
