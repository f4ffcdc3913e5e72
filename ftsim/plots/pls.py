"""(d) Accuracy cost versus PLS (the portion of lost samples, CPR's predictor): one point
per replication, coloured per policy, with the least-squares line over all of them."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from ftsim.plots.data import RunData, Skip
from ftsim.plots.style import SINGLE_COLUMN_IN, save

NAME = "accuracy_vs_pls"


def plot(data: RunData, folder, point: int | None = None):
    if not (data.has("pls") and data.has("logloss_delta")):
        raise Skip("no pls and logloss_delta columns (the runs were timing only)")
    runs = data.runs.dropna(subset=["pls", "logloss_delta"])
    if runs["pls"].nunique() < 2:
        raise Skip("PLS takes a single value: no line to fit")
    fit = scipy_stats.linregress(runs["pls"], runs["logloss_delta"])
    fig, ax = plt.subplots(figsize=(SINGLE_COLUMN_IN, 2.4))
    for policy, g in runs.groupby("policy", sort=False):
        style = data.styles[policy]
        ax.plot(
            g["pls"],
            g["logloss_delta"],
            color=style.color,
            marker=style.marker,
            linestyle="none",
            alpha=0.7,
            markersize=3,
            label=style.name,
        )
    x = np.linspace(runs["pls"].min(), runs["pls"].max(), 50)
    ax.plot(
        x,
        fit.intercept + fit.slope * x,
        color="0.2",
        linewidth=1.0,
        label=f"fit: slope {fit.slope:.3g}, r² = {fit.rvalue**2:.2f}",
    )
    ax.set_xlabel("PLS (portion of lost samples)")
    ax.set_ylabel("log-loss increase vs failure-free")
    ax.set_title(f"{data.scenario_name}: n = {len(runs)} replications")
    ax.legend(loc="best")
    table = runs[["point", "policy", "rep", "pls", "logloss_delta"]].assign(
        fit_slope=fit.slope, fit_intercept=fit.intercept, fit_r2=fit.rvalue**2
    )
    return save(fig, pd.DataFrame(table), folder, NAME)
