"""(a) Where the overhead goes: stacked bars per policy (save, load, lost, reschedule,
degraded, other) in percent of the failure-free time, with the 95% interval of the total."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ftsim.plots.data import RunData
from ftsim.plots.style import CATEGORY_COLORS, DOUBLE_COLUMN_IN, SINGLE_COLUMN_IN, save
from ftsim.sim.accounting import CATEGORIES

NAME = "breakdown"


def table(data: RunData, point: int | None) -> pd.DataFrame:
    """One row per policy: its point (``point``, or its lowest mean overhead) and the bars."""
    s = data.summary
    rows = []
    for policy in data.policies:
        mine = s[s["policy"] == policy]
        if point is not None:
            mine = mine[mine["point"] == point]
        if mine.empty:
            continue
        best = mine.loc[mine["overhead_frac_mean"].idxmin()]
        ideal = best["ideal_h_mean"]
        row = {
            "policy": policy,
            "point": int(best["point"]),
            "setting": data.describe_point(best["point"]),
        }
        row.update({f"{c}_pct": 100 * best[f"{c}_h_mean"] / ideal for c in CATEGORIES})
        row.update(
            overhead_pct=100 * best["overhead_frac_mean"],
            ci95_low_pct=100 * best["overhead_frac_ci95_low"],
            ci95_high_pct=100 * best["overhead_frac_ci95_high"],
            n=int(best["n"]),
        )
        rows.append(row)
    return pd.DataFrame(rows)


def plot(data: RunData, folder, point: int | None = None):
    t = table(data, point)
    width = SINGLE_COLUMN_IN if len(t) <= 4 else DOUBLE_COLUMN_IN
    fig, ax = plt.subplots(figsize=(width, 2.4))
    x = np.arange(len(t))
    bottom = np.zeros(len(t))
    for c in CATEGORIES:
        ax.bar(
            x,
            t[f"{c}_pct"],
            0.6,
            bottom=bottom,
            color=CATEGORY_COLORS[c],
            label=c,
            edgecolor="white",
            linewidth=0.3,
        )
        bottom += t[f"{c}_pct"].to_numpy()
    for i, row in t.iterrows():
        style = data.styles[row["policy"]]
        err = [
            [row["overhead_pct"] - row["ci95_low_pct"]],
            [row["ci95_high_pct"] - row["overhead_pct"]],
        ]
        ax.errorbar(
            i,
            row["overhead_pct"],
            yerr=err,
            color=style.color,
            marker=style.marker,
            markersize=3.5,
            linewidth=0.8,
        )
    labels = [data.styles[p].name for p in t["policy"]]
    if data.columns and point is None:
        labels = [
            f"{n}\n" + s.replace(", ", "\n") for n, s in zip(labels, t["setting"], strict=True)
        ]
    ax.set_xticks(
        x, labels, rotation=0 if len(t) <= 4 else 20, ha="center" if len(t) <= 4 else "right"
    )
    for tick, policy in zip(ax.get_xticklabels(), t["policy"], strict=True):
        tick.set_color(data.styles[policy].color)
    ax.set_ylabel("overhead (% of failure-free time)")
    ax.set_xlim(-0.6, len(t) - 0.4 if len(t) > 1 else 0.6)
    ax.set_ylim(0, max(t["ci95_high_pct"].fillna(t["overhead_pct"]).max(), bottom.max()) * 1.1)
    ax.grid(axis="x", visible=False)
    handles, names = ax.get_legend_handles_labels()
    ax.legend(
        handles[::-1], names[::-1], loc="upper left", bbox_to_anchor=(1.0, 1.0), handlelength=1.0
    )
    n = "/".join(str(v) for v in sorted(set(t["n"])))
    where = ""
    if data.columns:
        where = (
            "; each policy at its best point"
            if point is None
            else f"; {data.describe_point(point)}"
        )
    ax.set_title(f"{data.scenario_name}: mean of n = {n} replications, 95% CI{where}")
    return save(fig, t, folder, NAME)
