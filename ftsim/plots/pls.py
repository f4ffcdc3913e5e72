"""(d) Accuracy cost versus PLS (the portion of lost samples, CPR's predictor): one point
per trained replication, with a least-squares line fitted to each policy separately.

Policies lose samples differently (a prioritized save keeps the most used rows, so a lost
sample costs it less than it costs vanilla CPR), so one line over all of them would mix
slopes. Policies whose measured PLS is identically 0 (exact recovery: full rollback, SWIFT
with a full log) have nothing to fit and would only pile points at the origin: they are left
out and named in the title. Panels share their axes, so that slopes compare by eye. The n
of each fit is the number of that policy's trained replications (over all sweep points of
its panel). A policy the same at several points (a sweep of another policy's field) has
the same replications at each, its rows copied: they count once, as the replications they
are.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from ftsim.plots import facets
from ftsim.plots.data import RunData, Skip
from ftsim.plots.style import Output

NAME = "accuracy_vs_pls"
X, Y = "pls_measured", "logloss_delta"


MAX_COLUMNS = 2
"""Panels in a row: each writes its policies' slopes ("CPR-MFU: slope 0.0051 ± 0.0031,
r² 0.80", some 1.8 in at 6 pt), which four panels of a 7-in figure cannot hold (their axes
collapsed to slivers)."""

MIN_FIT = 3
"""Fewest replications a line is fitted to (through 2 points, r² is 1 whatever they are)."""


def fits(runs: pd.DataFrame) -> pd.DataFrame:
    """Per policy with some non-zero PLS: slope (with the half-width of its 95% t-interval,
    n − 2 degrees of freedom), intercept, r² and n of ``Y`` on ``X`` (NaN when all its PLS
    values are equal or it has fewer than :data:`MIN_FIT` replications: its points are
    drawn, no line)."""
    out = []
    for policy, g in runs.groupby("policy", sort=False):
        if not (g[X] != 0).any():
            continue
        slope = half = intercept = r2 = np.nan
        if g[X].nunique() >= 2 and len(g) >= MIN_FIT:
            fit = scipy_stats.linregress(g[X], g[Y])
            slope, intercept, r2 = fit.slope, fit.intercept, fit.rvalue**2
            half = scipy_stats.t.ppf(0.975, len(g) - 2) * fit.stderr
        out.append({"policy": policy, "slope": slope, "slope_ci95_half": half})
        out[-1] |= {"intercept": intercept, "r2": r2, "n": len(g)}
    columns = ["policy", "slope", "slope_ci95_half", "intercept", "r2", "n"]
    return pd.DataFrame(out, columns=columns)


def slope_text(fit) -> str:
    """``slope -0.0036 ± 0.0021`` (the 95% interval's half-width: a slope through few
    replications is uncertain, as its sign may be)."""
    return f"slope {fit.slope:.2g} ± {fit.slope_ci95_half:.2g}"


def distinct(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with each policy's replication once: a policy the same at several points
    gives the same replication at each (the same measured PLS and log-loss), the first
    point's row kept."""
    return runs.drop_duplicates(subset=["policy", "rep", X, Y])


def plot(data: RunData, out: Output, point: int | None = None):
    if not (data.has(X) and data.has(Y)):
        raise Skip(f"no {X} and {Y} columns (the runs were timing only)")
    runs = data.runs.dropna(subset=[X, Y])
    table = fits(runs)
    if table.empty:
        raise Skip("every policy's PLS is 0: no line to fit")
    dimensions = [d for d in data.dimensions if not d.policy_knob]
    grid = facets.layout(data, dimensions, max_columns=MAX_COLUMNS)
    fig, axes = facets.figure(grid, 1.8, 0.4, sharex=True, sharey=True)  # panels compared
    drawn, labels, plotted, counts = {}, {}, [], set()
    lines = 0  # of slopes written in a panel, at most
    for panel, ax in axes.items():
        here = distinct(runs[runs["point"].isin(panel.points)])
        mine = fits(here)
        counts.update(mine["n"])
        if mine.empty:  # no trained replication of the panel lost a sample
            _nothing_to_fit(ax)
        rows = here[here["policy"].isin(mine["policy"])][["point", "policy", "rep", X, Y]]
        rows = rows.merge(mine.add_prefix("fit_").rename(columns={"fit_policy": "policy"}))
        plotted.append(rows.assign(panel=panel.title))
        for fit in mine.itertuples():
            g = here[here["policy"] == fit.policy]
            style = data.styles[fit.policy]
            label = f"{style.name}: n = {fit.n}"
            if fit.slope != fit.slope:  # no line: say why (n = 2 drew none, unexplained)
                why = f"< {MIN_FIT} runs" if fit.n < MIN_FIT else "one PLS value"
                label += f", no line ({why})"
            else:
                label += f", {slope_text(fit)}, r² = {fit.r2:.2f}"
                x = np.linspace(g[X].min(), g[X].max(), 50)
                ax.plot(x, fit.intercept + fit.slope * x, color=style.color, linewidth=1.0)
            (handle,) = ax.plot(
                g[X],
                g[Y],
                color=style.color,
                marker=style.marker,
                linestyle="none",
                alpha=0.6,
                markersize=3,
            )
            drawn.setdefault(fit.policy, handle)
            labels.setdefault(fit.policy, []).append(label)
        if not mine.empty:
            ax.axhline(0, color="0.3", linewidth=0.5)
        if grid.panels[1:]:
            ax.set_title(panel.title)
            lines = max(lines, _fits_in_panel(data, ax, mine))
    if lines:
        _room_above(next(iter(axes.values())), lines)
    facets.axis_labels(
        fig, "PLS measured (portion of lost samples)", "Δ log loss vs failure-free (nats)"
    )
    n = "/".join(map(str, sorted(counts)))
    title = f"{data.scenario_name}: n = {n} trained reps per policy"
    if grid.panels[1:]:
        title += " and panel; one least-squares line per policy and panel (slope ± 95% CI, r²)"
        legend = [data.styles[p].name for p in drawn]
    else:
        legend = [labels[p][0] for p in drawn]
    exact = [data.styles[p].name for p in runs["policy"].unique() if p not in set(table.policy)]
    facets.title(
        fig,
        grid.width_in,
        title,
        f"PLS 0, not shown: {', '.join(exact)}" if exact else "",
        grid.header(),
    )
    facets.legend(fig, grid.width_in, list(drawn.values()), legend)
    return out.save(fig, pd.concat(plotted, ignore_index=True), NAME)


FIT_LINE = 0.09
"""Height of a line of the slopes written in a panel, as a fraction of the panel's."""


def _fits_in_panel(data: RunData, ax, mine: pd.DataFrame) -> int:
    """Each policy's slope and r² in the panel's upper left, in its colour (one legend
    serves every panel: it names the policies only); returns the lines it took."""
    for i, fit in enumerate(mine.itertuples()):
        if fit.slope != fit.slope:  # one PLS value: no line
            continue
        ax.text(
            0.03,
            0.97 - FIT_LINE * i,
            f"{data.styles[fit.policy].name}: {slope_text(fit)}, r² {fit.r2:.2f}",
            transform=ax.transAxes,
            va="top",
            fontsize=6,
            color=data.styles[fit.policy].color,
        )
    return len(mine)


def _room_above(ax, lines: int) -> None:
    """Raise the top of the (shared) log-loss axis so that the data stay below ``lines``
    of slopes: written over the points, they hid them (a new user's three panels)."""
    low, high = ax.get_ylim()
    text = 0.05 + FIT_LINE * lines  # of the panel's height, from its top
    ax.set_ylim(low, low + (high - low) / (1 - text))


def _nothing_to_fit(ax) -> None:
    """A panel whose trained replications lost no sample: said, with no axes to read."""
    ax.text(
        0.5,
        0.5,
        "no trained replication\nlost a sample here",
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=6,
        color="0.3",
    )
    ax.set_xticks([])
    ax.set_yticks([])
