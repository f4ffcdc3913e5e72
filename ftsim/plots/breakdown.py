"""(a) Where the overhead goes: stacked bars per policy (save, load, lost, reschedule,
degraded, other) in percent of the failure-free time, with the 95% interval of the total.
A composed policy's bar is followed by one narrower bar per part (``↳ part``), stacked from
the part's own columns (``<part>/<category>_h``): the parts' bars add up to the policy's,
less its rescheduling, which belongs to the whole job.

Overheads of the policies differ by orders of magnitude (0.5% next to 8%): on a linear axis
the small bars are slivers whose parts cannot be seen. When the policies' totals span more
than 10× (or when asked), each panel is drawn on two axes side by side instead: the totals
with their 95% intervals as points on a log axis (from the decade of the least; a part's
total below it is written at the axis' start), and each bar's parts as shares of its total
on a linear axis from 0 to 100%. A stack on a log axis misleads whichever way it is split:
its segments' ends do not sit at the cumulative values, and its length depends on where
the axis starts.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ftsim.notices import short_duration
from ftsim.plots import facets
from ftsim.plots.data import RunData, Skip
from ftsim.plots.style import CATEGORY_COLORS, Output
from ftsim.sim.accounting import CATEGORIES, LOAD, OTHER, PART_CATEGORIES

NAME = "breakdown"
LABELS = {c: c for c in CATEGORIES} | {"load": LOAD, "other": OTHER.replace(": ", ":\n", 1)}
"""Legend entries; ``load`` and ``other`` say what they are (``other`` on two lines)."""


def table(data: RunData, point: int | None, max_pls: float | None = None) -> pd.DataFrame:
    """One row per panel and policy (then its parts): the policy's point and its bars.

    The point is ``point``, or in each panel (environment point) the policy's lowest mean
    overhead over its knobs, among the settings with PLS at most ``max_pls`` (the measured
    PLS where the model trained, else the time model's ``pls_model``; a policy without
    either loses no samples).
    """
    s = data.summary
    grid = _layout(data, point)
    rows = []
    for panel in grid.panels:
        here = s[s["point"].isin(panel.points)]
        for policy in data.policies:
            best = _best(data, here[here["policy"] == policy], policy, panel, max_pls)
            if best is None:
                continue
            ideal = best["ideal_h_mean"]
            row = {
                "panel": panel.title,
                "policy": policy,
                "point": int(best["point"]),
            }
            row["setting"], row[INTERVAL_SAID] = _setting(
                data, best, here[here["policy"] == policy]
            )
            row["pls"], row["pls_from"], row["pls_n"] = _pls(best)
            row["interval_h"] = best.get("interval_h_mean", float("nan"))
            row.update({f"{c}_pct": 100 * best[f"{c}_h_mean"] / ideal for c in CATEGORIES})
            row.update(
                overhead_pct=100 * best["overhead_frac_mean"],
                ci95_low_pct=100 * best["overhead_frac_ci95_low"],
                ci95_high_pct=100 * best["overhead_frac_ci95_high"],
                n=int(best["n"]),
                n_unfinished=int(best.get("n_unfinished", 0)),
            )
            rows.append(row)
            rows += _part_rows(row, best, ideal)
    if not rows:
        raise Skip(
            "no policy has a finished replication"
            + (f" with PLS ≤ {max_pls:g}" if max_pls is not None else "")
        )
    return _intervals_said(pd.DataFrame(rows))


INTERVAL_SAID = "_interval_said"
"""A row's column while the table is built: whether its setting names the interval that ran
(a fall-back's, or a swept interval's)."""


def _intervals_said(t: pd.DataFrame) -> pd.DataFrame:
    """``t`` with the interval each bar ran added to its setting where the setting does not
    name it: planned intervals (Daly's, CPR's from its target PLS, per failure rate 22.5 h
    to 2.25 h) are what a reader needs to judge a bar, and no label said them."""
    for i in t.index[~t[INTERVAL_SAID] & t["interval_h"].notna()]:
        said, setting = f"every {short_duration(3600 * t.at[i, 'interval_h'])}", t.at[i, "setting"]
        t.at[i, "setting"] = f"{setting}, {said}" if setting else said
    return t.drop(columns=INTERVAL_SAID)


def _layout(data: RunData, point: int | None) -> facets.Layout:
    """One panel per environment point (one panel for ``point``)."""
    if point is not None:
        return facets.layout(data, [], [point])
    return facets.layout(data, [d for d in data.dimensions if not d.policy_knob], max_columns=3)


def _best(data: RunData, mine: pd.DataFrame, policy: str, panel, max_pls) -> pd.Series | None:
    """The policy's cheapest row of ``mine`` within the PLS limit; None (noted) if none."""
    where = f" ({panel.title})" if panel.title else ""
    if mine.empty:
        return None
    if mine["overhead_frac_mean"].isna().all():
        data.omit(NAME, f"without {policy}{where}: none of its replications finished")
        return None
    if max_pls is not None:
        pls = mine.apply(lambda row: _pls(row)[0], axis=1)
        mine = mine[pls.isna() | (pls <= max_pls)]
        if mine.empty:
            data.omit(NAME, f"without {policy}{where}: no setting has PLS ≤ {max_pls:g}")
            return None
        if mine["overhead_frac_mean"].isna().all():
            return None
    return mine.loc[mine["overhead_frac_mean"].idxmin()]


def _fell_back(data: RunData, best: pd.Series) -> str:
    """What ran instead, when CPR fell back to full recovery at Daly's interval ('' if not):
    the label of the interval it ran, not of the one asked for."""
    if data.decisions.get((best["point"], best["policy"])) != "full":
        return ""
    return f"fell back to full\nrecovery every {short_duration(3600 * best['interval_h_mean'])}"


def _pls(row: pd.Series) -> tuple[float, str, int]:
    """The row's PLS, the column it is the mean of and over how many replications: measured
    where the model trained (over the trained replications, fewer than the bars' ``n``),
    else the time model's estimate; (NaN, '', 0) for a policy with neither."""
    for column, n in (("pls_measured", "n_trained"), ("pls_model", "n")):
        if f"{column}_mean" in row and pd.notna(row[f"{column}_mean"]):
            return float(row[f"{column}_mean"]), column, int(row.get(n, row["n"]))
    return float("nan"), "", 0


def _setting(data: RunData, best: pd.Series, mine: pd.DataFrame) -> tuple[str, bool]:
    """The values at ``best``'s point of the policy knobs that change this policy (``mine``:
    its summary rows in the panel), ``key=value, …``: what its best point chose. A knob of
    another policy (``policies.0.interval`` for policy 1) leaves its rows identical, but
    for the paired differences against the reference policy (``…_diff_…``), which follow
    the reference's knobs and are not what this policy ran. When
    CPR fell back to full recovery, the interval asked for did not run: the label says
    what did instead. Returns the label and whether it names the interval that ran (a
    fall-back's, or a swept ``interval``'s)."""
    point, policy = int(best["point"]), best["policy"]
    ran_instead = _fell_back(data, best)
    knobs = [d for d in data.dimensions if d.policy_knob]
    results = [  # what ran: not the swept values (nor their ``<key>_si`` forms), not diffs
        c
        for c in mine.columns
        if c.endswith("_mean") and "_diff_" not in c and not c.startswith(tuple(data.columns))
    ]
    means = mine[results].astype(float).round(12)
    signature = pd.Series([str(tuple(row)) for row in means.to_numpy()], index=mine.index)
    chosen = []
    for d in knobs:
        if ran_instead and d.sets_interval:
            continue
        others = mine["point"].map(
            lambda p, d=d: tuple(data.value_of(p, k) for k in knobs if k is not d)
        )
        if (signature.groupby(others).nunique() > 1).any():
            values = dict(zip(d.keys, data.value_of(point, d), strict=True))
            mine_keys = [k for k in d.keys if _applies(data, k, policy)] or list(d.keys)
            chosen += [(k.rsplit(".", 1)[-1], values[k]) for k in mine_keys]
    label = ", ".join(dict.fromkeys(f"{field}={value}" for field, value in chosen))
    said = bool(ran_instead) or any(field == "interval" for field, _ in chosen)
    return "\n".join(filter(None, [label, ran_instead])), said


def _applies(data: RunData, key: str, policy: str) -> bool:
    """Whether ``policies.I.field`` or ``policies.*.field`` names ``policy`` (the I-th
    policy of the run)."""
    index = key.split(".")[1] if key.count(".") >= 2 else "*"
    return index == "*" or index == str(data.policies.index(policy))


def _part_rows(row: dict, best: pd.Series, ideal: float) -> list[dict]:
    """The bars of a composed policy's parts: one per part named in its columns."""
    suffix = f"/{PART_CATEGORIES[0]}_h_mean"
    names = [c[: -len(suffix)] for c in best.index if c.endswith(suffix) and pd.notna(best[c])]
    out = []
    for name in names:
        part = {**row, "part": name}
        part.update({f"{c}_pct": 0.0 for c in CATEGORIES})
        part.update({f"{c}_pct": 100 * best[f"{name}/{c}_h_mean"] / ideal for c in PART_CATEGORIES})
        part["overhead_pct"] = sum(part[f"{c}_pct"] for c in CATEGORIES)
        part.update(ci95_low_pct=np.nan, ci95_high_pct=np.nan)
        out.append(part)
    return out


def log_axis(t: pd.DataFrame, scale: str) -> bool:
    """Whether to draw on a log axis: as asked, or (``auto``) when the totals span more than
    :data:`~ftsim.plots.facets.SPAN`×."""
    return facets.log_scale(t["overhead_pct"], scale)


def segments(parts: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per category, the (left, width) of its segment in every bar: cumulative sums of
    ``parts`` (a row per bar, a column per category of :data:`CATEGORIES`)."""
    edges = np.hstack([np.zeros((len(parts), 1)), np.cumsum(parts, axis=1)])
    return {c: (edges[:, i], edges[:, i + 1] - edges[:, i]) for i, c in enumerate(CATEGORIES)}


def shares(t: pd.DataFrame) -> np.ndarray:
    """Each bar's categories in percent of its total (a row of zeros for a zero total)."""
    parts = t[[f"{c}_pct" for c in CATEGORIES]].to_numpy()
    total = parts.sum(axis=1, keepdims=True)
    return np.divide(100 * parts, total, out=np.zeros_like(parts), where=total > 0)


SPLIT = (1.0, 0.8)
"""Relative widths of a log figure's two axes per panel: the totals, the shares."""


def plot(data: RunData, out: Output, point: int | None = None, scale: str = "auto", max_pls=None):
    """The figure; ``scale`` is ``auto``, ``linear`` or ``log`` (see the module)."""
    t = table(data, point, max_pls)
    grid = _layout(data, point)
    panels = [p for p in grid.panels if p.title in set(t["panel"])]
    grid = facets.Layout(tuple(panels), grid.rows, grid.cols, grid.dimensions)
    whole = t[~_is_part(t)]  # a part far below every policy (0.0007%) sets no decade
    log = log_axis(whole, scale)
    positive = whole.loc[whole["overhead_pct"] > 0, "overhead_pct"]
    floor = 10 ** np.floor(np.log10(positive.min())) if log and len(positive) else 0.0
    top = max(t["ci95_high_pct"].fillna(t["overhead_pct"]).max(), t["overhead_pct"].max())
    settings = bool(t["setting"].str.len().gt(0).any())
    bars = t.groupby("panel", sort=False).size().max()
    height = max(0.8, bars * _row_in(t)) + 0.25
    fig, axes = facets.figure(grid, height, 0.6, split=SPLIT if log else None)
    same_rows = t.groupby("panel", sort=False)[["policy", "setting"]].apply(
        lambda g: tuple(map(tuple, g.to_numpy()))
    )
    for panel, drawn in axes.items():
        totals, stacks = drawn if log else (drawn, drawn)
        mine = t[t["panel"] == panel.title].reset_index(drop=True)
        _policy_ticks(data, totals, mine, settings)
        if same_rows.nunique() == 1 and panel.col > 0:  # the first column's names serve
            totals.tick_params(labelleft=False)
        for ax in dict.fromkeys((totals, stacks)):
            ax.set_ylim(len(mine) - 0.5, -0.5)
            ax.grid(axis="y", visible=False)
        if log:
            _log_panel(data, totals, stacks, mine, floor, top)
        else:
            _bars(stacks, mine, mine[[f"{c}_pct" for c in CATEGORIES]].to_numpy())
            stacks.set_xlim(0, top * 1.1)
        _totals(data, totals, mine, parts=log)
        if grid.panels[1:]:
            totals.set_title(panel.title)
    for ax in fig.axes:
        if facets.lowest(ax, fig.axes):
            ax.set_xlabel(_xlabel(ax, log))
    handles, names = fig.axes[-1].get_legend_handles_labels()
    facets.legend(fig, grid.width_in, handles, names, handlelength=1.0)
    facets.title(fig, grid.width_in, _title(data, t, point, max_pls, log), grid.header())
    return out.save(fig, t, NAME)


def _log_panel(data: RunData, totals, stacks, t: pd.DataFrame, floor: float, top: float):
    """A panel of a log figure: the totals' log axis (from ``floor``, the policies' decade,
    past ``top``, the highest interval's end) and the parts' shares, 0 to 100%."""
    _bars(stacks, t, shares(t))
    stacks.set_yticks(np.arange(len(t)))
    stacks.tick_params(labelleft=False)
    stacks.set_xlim(0, 100)
    stacks.set_xticks([0, 50, 100])
    totals.grid(axis="y", visible=True)  # the rows the points sit on
    totals.set_xscale("log")
    totals.set_xlim(floor, top * 1.5)
    facets.plain_log_ticks(totals.xaxis)
    _below_the_axis(data, totals, t, floor)


def _xlabel(ax, log: bool) -> str:
    """The x label of a panel's axes; on a log figure, short (a panel's two axes may be
    0.6 in wide each): the title says what the total and the parts are."""
    if not log:
        return "overhead (%)"
    return "total (%)" if ax.get_xscale() == "log" else "parts (%)"


BAR_IN = 0.2
"""Height of a bar's row with a one-line name, in inches."""


def _row_in(t: pd.DataFrame) -> float:
    """Height of a bar's row: room for the longest label (name, setting, fall-back)."""
    lines = 1 + max((s.count("\n") + 1 for s in t["setting"] if s), default=0)
    return max(BAR_IN, 0.125 * lines + 0.06)


def _bars(ax, t: pd.DataFrame, parts: np.ndarray) -> None:
    """Stacked bars of ``parts`` (a row per bar of ``t``, a column per category); a part of
    a composed policy narrower."""
    y = np.arange(len(t))
    heights = np.where(_is_part(t), 0.45, 0.7)
    for c, (left, width) in segments(parts).items():
        ax.barh(
            y,
            width,
            heights,
            left=left,
            color=CATEGORY_COLORS[c],
            label=LABELS[c],
            edgecolor="white",
            linewidth=0.3,
        )


def _below_the_axis(data: RunData, ax, t: pd.DataFrame, floor: float) -> None:
    """The total of each part's bar that ends below the log axis' ``floor`` (the policies'
    decade), written at the axis' start: no bar to see, the number to read."""
    for i, row in t[_is_part(t)].iterrows():
        if 0 < row["overhead_pct"] < floor:
            ax.text(
                floor,
                i,
                f" {row['overhead_pct']:.2g}%",
                va="center",
                fontsize=6,
                color=data.styles[row["policy"]].color,
            )


def _totals(data: RunData, ax, t: pd.DataFrame, parts: bool) -> None:
    """The mean total and its 95% interval, in the policy's colour and marker; with
    ``parts`` (where no bar ends at it), a composed policy's part's total too, a smaller
    open marker. An interval reaching below the axis' start ends there in an arrow head:
    cut at the edge, it read as ending there (CPR's 0.18% ± 0.2% on a log axis from 0.1)."""
    left = ax.get_xlim()[0]
    for i, row in t.iterrows():
        style = data.styles[row["policy"]]
        if _is_part(t)[i]:
            if not parts:
                continue
            ax.plot(
                row["overhead_pct"], i, style.marker, color=style.color, markersize=2.5,
                markerfacecolor="none", markeredgewidth=0.6,
            )  # fmt: skip
            continue
        err = [
            [row["overhead_pct"] - row["ci95_low_pct"]],
            [row["ci95_high_pct"] - row["overhead_pct"]],
        ]
        ax.errorbar(
            row["overhead_pct"],
            i,
            xerr=err,
            color=style.color,
            marker=style.marker,
            markersize=3.5,
            linewidth=0.8,
        )
        if row["ci95_low_pct"] < left:
            ax.plot(left, i, "<", color=style.color, markersize=3, clip_on=False)


def _policy_ticks(data: RunData, ax, t: pd.DataFrame, settings: bool) -> None:
    """Policy names (with their chosen setting on a second line) in the policies' colours;
    a composed policy's parts indented under it."""
    parts = t["part"] if "part" in t else pd.Series(np.nan, index=t.index)
    labels = []
    for policy, setting, part in zip(t["policy"], t["setting"], parts, strict=True):
        if isinstance(part, str):
            labels.append(f"↳ {part}")
        else:
            name = data.styles[policy].name
            labels.append(f"{name}\n{setting}" if settings and setting else name)
    ax.set_yticks(np.arange(len(t)), labels)
    for tick, policy, part in zip(ax.get_yticklabels(), t["policy"], parts, strict=True):
        tick.set_color(data.styles[policy].color)
        if isinstance(part, str):
            tick.set_fontsize(6)
        else:
            tick.set_linespacing(1.0)


def _is_part(t: pd.DataFrame) -> np.ndarray:
    """Per bar: whether it is a part of a composed policy."""
    return t["part"].notna().to_numpy() if "part" in t else np.zeros(len(t), dtype=bool)


def _title(data: RunData, t: pd.DataFrame, point: int | None, max_pls, log: bool) -> str:
    t = t[~_is_part(t)]
    n = "/".join(str(v) for v in sorted(set(t["n"])))
    where = ""
    if point is not None and data.columns:
        where = f"; {data.describe_point(point)}"
    elif any(d.policy_knob for d in data.dimensions):
        limit = f" with PLS ≤ {max_pls:g}" if max_pls is not None else ""
        where = f"; each policy at its lowest-overhead setting{limit}"
    unfinished = int(t["n_unfinished"].sum())
    excluded = f" ({unfinished} unfinished left out)" if unfinished else ""
    scale = "; points: the total (%) on a log axis; bars: its parts, in % of it" if log else ""
    ci = ", 95% CI" if t["n"].max() > 1 else ", no CI from one replication"
    return (
        f"{data.scenario_name}: overhead in % of the failure-free time, mean of n = {n} "
        f"replications{excluded}{ci}{where}{scale}"
    )
