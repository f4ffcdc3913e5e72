"""(d) Accuracy cost versus PLS (the portion of lost samples, CPR's predictor): one point
per trained replication, with a least-squares line fitted to each policy separately.

Policies lose samples differently (a prioritized save keeps the most used rows, so a lost
sample costs it less than it costs vanilla CPR), so one line over all of them would mix
slopes. Policies whose measured PLS is identically 0 (exact recovery: full rollback, SWIFT
with a full log) have nothing to fit and would only pile points at the origin: they are left
out and named in the title. The n of each fit is the number of that policy's trained
replications (over all sweep points).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from ftsim.plots.data import RunData, Skip
from ftsim.plots.style import SINGLE_COLUMN_IN, save

NAME = "accuracy_vs_pls"
X, Y = "pls_measured", "logloss_delta"


def fits(runs: pd.DataFrame) -> pd.DataFrame:
    """Per policy with some non-zero PLS: slope, intercept, r² and n of ``Y`` on ``X``
    (slope and r² NaN when all its PLS values are equal)."""
    out = []
    for policy, g in runs.groupby("policy", sort=False):
        if not (g[X] != 0).any():
            continue
        if g[X].nunique() < 2:
            slope = intercept = r2 = np.nan
        else:
            fit = scipy_stats.linregress(g[X], g[Y])
            slope, intercept, r2 = fit.slope, fit.intercept, fit.rvalue**2
        out.append({"policy": policy, "slope": slope, "intercept": intercept, "r2": r2})
        out[-1]["n"] = len(g)
    return pd.DataFrame(out, columns=["policy", "slope", "intercept", "r2", "n"])


def plot(data: RunData, folder, point: int | None = None):
    if not (data.has(X) and data.has(Y)):
        raise Skip(f"no {X} and {Y} columns (the runs were timing only)")
    runs = data.runs.dropna(subset=[X, Y])
    table = fits(runs)
    if table.empty:
        raise Skip("every policy's PLS is 0: no line to fit")
    fig, ax = plt.subplots(figsize=(SINGLE_COLUMN_IN, 2.4))
    for fit in table.itertuples():
        g = runs[runs["policy"] == fit.policy]
        style = data.styles[fit.policy]
        label = f"{style.name}: n = {fit.n}"
        if fit.slope == fit.slope:
            label += f", slope {fit.slope:.3g}, r² = {fit.r2:.2f}"
            x = np.linspace(g[X].min(), g[X].max(), 50)
            ax.plot(x, fit.intercept + fit.slope * x, color=style.color, linewidth=1.0)
        ax.plot(
            g[X],
            g[Y],
            color=style.color,
            marker=style.marker,
            linestyle="none",
            alpha=0.6,
            markersize=3,
            label=label,
        )
    ax.axhline(0, color="0.3", linewidth=0.5)
    ax.set_xlabel("PLS measured (portion of lost samples)")
    ax.set_ylabel("log-loss increase vs failure-free")
    counts = sorted(set(table["n"]))
    title = f"{data.scenario_name}: n = {'/'.join(map(str, counts))} trained reps per policy"
    exact = [data.styles[p].name for p in runs["policy"].unique() if p not in set(table.policy)]
    if exact:
        title += f"\nPLS 0, not shown: {', '.join(exact)}"
    ax.set_title(title)
    ax.legend(loc="best", fontsize="small")
    rows = runs[runs["policy"].isin(table["policy"])][["point", "policy", "rep", X, Y]]
    rows = rows.merge(table.add_prefix("fit_").rename(columns={"fit_policy": "policy"}))
    return save(fig, rows, folder, NAME)
