"""(c) Accuracy cost versus time overhead: mean log-loss delta against mean overhead for
every policy at every sweep point, with 95% intervals, and the trade-off frontier (the
points no other point beats on both)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from ftsim.plots.data import RunData, Skip
from ftsim.plots.style import SINGLE_COLUMN_IN, save

NAME = "accuracy_vs_overhead"


def frontier(
    points: pd.DataFrame, x: str = "overhead_pct", y: str = "logloss_delta"
) -> pd.DataFrame:
    """Rows not dominated on (``x``, ``y``): lower is better for both."""
    ordered = points.sort_values([x, y])
    best, keep = float("inf"), []
    for index, row in ordered.iterrows():
        if row[y] < best:
            best = row[y]
            keep.append(index)
    return ordered.loc[keep]


def plot(data: RunData, folder, point: int | None = None):
    if not data.has("logloss_delta"):
        raise Skip("no logloss_delta column (the runs were timing only, without the trainer)")
    s = data.summary.dropna(subset=["logloss_delta_mean"])
    t = pd.DataFrame(
        {
            "policy": s["policy"],
            "point": s["point"],
            "overhead_pct": 100 * s["overhead_frac_mean"],
            "overhead_ci95_low_pct": 100 * s["overhead_frac_ci95_low"],
            "overhead_ci95_high_pct": 100 * s["overhead_frac_ci95_high"],
            "logloss_delta": s["logloss_delta_mean"],
            "logloss_delta_ci95_low": s["logloss_delta_ci95_low"],
            "logloss_delta_ci95_high": s["logloss_delta_ci95_high"],
            "n": s["n"],
            "n_trained": s["n_trained"],
        }
    )
    t["frontier"] = t.index.isin(frontier(t).index)
    fig, ax = plt.subplots(figsize=(SINGLE_COLUMN_IN, 2.4))
    edge = frontier(t)
    ax.plot(
        edge["overhead_pct"],
        edge["logloss_delta"],
        color="0.6",
        linewidth=0.8,
        drawstyle="steps-post",
        zorder=1,
        label="frontier",
    )
    for policy, g in t.groupby("policy", sort=False):
        style = data.styles[policy]
        xerr = [
            g["overhead_pct"] - g["overhead_ci95_low_pct"],
            g["overhead_ci95_high_pct"] - g["overhead_pct"],
        ]
        yerr = [
            g["logloss_delta"] - g["logloss_delta_ci95_low"],
            g["logloss_delta_ci95_high"] - g["logloss_delta"],
        ]
        ax.errorbar(
            g["overhead_pct"],
            g["logloss_delta"],
            xerr=xerr,
            yerr=yerr,
            color=style.color,
            marker=style.marker,
            linestyle="none",
            elinewidth=0.6,
            label=style.name,
        )
    ax.axhline(0, color="0.3", linewidth=0.5)
    ax.set_xlabel("overhead (% of failure-free time)")
    ax.set_ylabel("log-loss increase vs failure-free")
    n = "/".join(str(v) for v in sorted(set(t["n"])))
    n_trained = "/".join(str(v) for v in sorted(set(t["n_trained"])))
    ax.set_title(f"{data.scenario_name}: means, 95% CI; overhead n = {n}, accuracy n = {n_trained}")
    ax.legend(loc="best")
    return save(fig, t, folder, NAME)
