"""(c) Accuracy cost versus time overhead: mean log-loss delta against mean overhead for
every policy at every sweep point, with 95% intervals, and the trade-off frontier (the
points no other point beats on both), in a panel per environment point of a sweep.

A sweep of a policy knob (``policies.*.target_pls``) puts a policy's settings in one panel:
a thin line joins them in the sweep's order from a ring around the first, which the legend
names (``target_pls=0.025: where each line starts``), so that the reader sees which end
is which without a label among the points (where it would collide with its neighbours' at
close settings); the CSV's ``setting`` column names every point's.

The overhead axis is logarithmic when the points span more than 10× (as the other
figures'): a sweep's 3% next to 1,300% on a linear axis put every point but one at 0."""

from __future__ import annotations

import pandas as pd

from ftsim.plots import facets
from ftsim.plots.data import RunData, Skip
from ftsim.plots.style import Output

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


def plot(data: RunData, out: Output, point: int | None = None):
    if not data.has("logloss_delta"):
        raise Skip("no logloss_delta column (the runs were timing only, without the trainer)")
    return draw(data, out, "logloss_delta", "Δ log loss vs failure-free (nats)", NAME, True)


def draw(
    data: RunData,
    out: Output,
    y: str,
    ylabel: str,
    name: str,
    trained: bool = False,
    missing: float | None = None,
    floor: float | None = None,
):
    """Mean ``y`` (a column of the runs) against mean overhead per policy and point, with
    both 95% intervals, the frontier, and a knob's settings joined (:func:`_settings`), in a
    panel per environment point; saved as ``name``. ``trained``: ``y`` is measured on the
    trained replications, whose n the title gives beside the overhead's. ``missing``: the
    value of ``y`` for a policy without it (none: such a policy is left out). ``floor``: the
    least value ``y`` can take (a PLS: 0): an interval reaching below it is drawn to it (the
    CSV keeps the t-interval)."""
    s = data.summary
    if missing is not None:
        s = s.fillna({f"{y}_{part}": missing for part in ("mean", "ci95_low", "ci95_high")})
    s = s.dropna(subset=[f"{y}_mean"])
    t = pd.DataFrame(
        {
            "policy": s["policy"],
            "point": s["point"],
            "overhead_pct": 100 * s["overhead_frac_mean"],
            "overhead_ci95_low_pct": 100 * s["overhead_frac_ci95_low"],
            "overhead_ci95_high_pct": 100 * s["overhead_frac_ci95_high"],
            y: s[f"{y}_mean"],
            f"{y}_ci95_low": s[f"{y}_ci95_low"],
            f"{y}_ci95_high": s[f"{y}_ci95_high"],
            "n": s["n"],
            **({"n_trained": s["n_trained"]} if trained else {}),
        }
    )
    if any(d.policy_knob for d in data.dimensions):  # a knob's settings: in the CSV too
        pairs = zip(t["point"], t["policy"], strict=True)
        t["setting"] = [_setting(data, point, policy) for point, policy in pairs]
    grid = facets.layout(data, [d for d in data.dimensions if not d.policy_knob])
    fig, axes = facets.figure(grid, 1.8, 0.4, sharex=True, sharey=True)  # compared by eye
    log = facets.log_scale(t["overhead_pct"], "auto")
    tables = []
    for panel, ax in axes.items():
        mine = t[t["point"].isin(panel.points)].copy()
        mine["frontier"] = mine.index.isin(frontier(mine, y=y).index)
        mine.insert(0, "panel", panel.title)
        tables.append(mine)
        _draw(data, ax, mine, y, floor)
        if log:  # a band reaching below 0 is cut at the axis
            ax.set_xscale("log", nonpositive="clip")
            facets.plain_log_ticks(ax.xaxis)
        if grid.panels[1:]:
            ax.set_title(panel.title)
    xlabel = "overhead (%, log axis)" if log else "overhead (%)"
    facets.axis_labels(fig, xlabel, ylabel)
    n = "/".join(str(v) for v in sorted(set(t["n"])))
    counts = f"n = {n}"
    if trained:
        n_trained = "/".join(str(v) for v in sorted(set(t["n_trained"])))
        counts = f"overhead n = {n}, accuracy n = {n_trained}"
    facets.title(
        fig, grid.width_in, f"{data.scenario_name}: means, 95% CI; {counts}", grid.header()
    )
    facets.legend(fig, grid.width_in)
    return out.save(fig, pd.concat(tables), name)


def _setting(data: RunData, point: int, policy: str) -> str:
    """The policy knobs swept at ``point`` that set something of ``policy``:
    ``target_pls=0.025`` ('' when none sets this policy)."""
    knobs = {k for d in data.dimensions if d.policy_knob for k in d.keys}
    return data.describe_point(point, policy, among=knobs)


def _draw(data: RunData, ax, t: pd.DataFrame, y: str, floor: float | None = None) -> None:
    """The frontier (a grey staircase), each policy's points with both intervals, and the
    lines and end labels of a knob's settings (:func:`_settings`)."""
    edge = t[t["frontier"]].sort_values("overhead_pct")  # a staircase: left to right
    ax.plot(
        edge["overhead_pct"],
        edge[y],
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
        low = g[f"{y}_ci95_low"] if floor is None else g[f"{y}_ci95_low"].clip(lower=floor)
        yerr = [g[y] - low, g[f"{y}_ci95_high"] - g[y]]
        ax.errorbar(
            g["overhead_pct"],
            g[y],
            xerr=xerr,
            yerr=yerr,
            color=style.color,
            marker=style.marker,
            linestyle="none",
            elinewidth=0.6,
            label=style.name,
        )
    _settings(data, ax, t, y)
    ax.axhline(0, color="0.3", linewidth=0.5)


def _settings(data: RunData, ax, t: pd.DataFrame, y: str) -> None:
    """A thin line through each policy's points whose settings differ (by one knob) and which
    lie apart, in the sweep's order, from a ring around its first point, named in the legend
    by that setting (once for every policy when their first settings read alike)."""
    if "setting" not in t:
        return
    varied = t[t["setting"] != ""].drop_duplicates(["policy", "setting"])
    lines = [g.sort_values("point") for _, g in varied.groupby("policy", sort=False)]
    # one knob only: in the sweep's order, two knobs' settings would zig-zag across both;
    # and points apart: settings that ran alike (CPR falling back at each) make no line
    lines = [
        g
        for g in lines
        if not g["setting"].str.contains(", ").any()
        and len(g[["overhead_pct", y]].drop_duplicates()) > 1
    ]
    same = len({g["setting"].iloc[0] for g in lines}) == 1
    for g in lines:
        color = data.styles[g["policy"].iloc[0]].color
        ax.plot(g["overhead_pct"], g[y], color=color, linewidth=0.5, alpha=0.6,
                zorder=1)  # fmt: skip
        first = g.iloc[0]
        name = (
            first["setting"] if same else f"{data.styles[first['policy']].name}: {first['setting']}"
        )
        ax.plot(
            [first["overhead_pct"]],
            [first[y]],
            marker="o",
            markersize=9,
            markerfacecolor="none",
            markeredgecolor="0.3" if same else color,
            markeredgewidth=0.6,
            linestyle="none",
            label=f"{name}: where each line starts",
            zorder=3,
        )
