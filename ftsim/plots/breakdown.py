"""(a) Where the overhead goes: stacked bars per policy (save, load, lost, reschedule,
degraded, other) in percent of the failure-free time, with the 95% interval of the total.
A composed policy's bar is followed by one narrower bar per part (``↳ part``), stacked from
the part's own columns (``<part>/<category>_h``): the parts' bars add up to the policy's,
less its rescheduling, which belongs to the whole job.

Overheads of the policies differ by orders of magnitude (0.5% next to 8%), so the axis is
logarithmic when the totals span more than ``SPAN``× (or when asked). On a log axis a
stack's segments cannot be read as differences of cumulative sums, so each bar is split in
proportion to its categories in log space: the top of the bar is the total, and each
segment's share of the bar's height is its share of the overhead.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ftsim.plots.data import RunData, Skip
from ftsim.plots.style import CATEGORY_COLORS, DOUBLE_COLUMN_IN, SINGLE_COLUMN_IN, save
from ftsim.sim.accounting import CATEGORIES, OTHER, PART_CATEGORIES

NAME = "breakdown"
SPAN = 10.0
"""``auto`` scale: logarithmic when the largest total exceeds the smallest by this factor."""
SCALES = ("auto", "linear", "log")
LABELS = {c: c for c in CATEGORIES} | {"other": OTHER.replace(": ", ":\n", 1)}
"""Legend entries; ``other`` says what it is (background traffic), on two lines."""


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
        if mine["overhead_frac_mean"].isna().all():
            data.omit(NAME, f"without {policy}: none of its replications finished")
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
            n_unfinished=int(best.get("n_unfinished", 0)),
        )
        rows.append(row)
        rows += _part_rows(row, best, ideal)
    if not rows:
        raise Skip("no policy has a finished replication")
    return pd.DataFrame(rows)


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
    """Whether to draw on a log axis: as asked, or (``auto``) when totals span > ``SPAN``×."""
    if scale != "auto":
        return scale == "log"
    totals = t.loc[t["overhead_pct"] > 0, "overhead_pct"]
    return len(totals) > 1 and totals.max() > SPAN * totals.min()


def segments(t: pd.DataFrame, log: bool, floor: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per category, the (bottom, height) of its segment in every bar, in percent.

    Linear: cumulative sums. Log: bar i rises from ``floor`` to its total, and the segments
    split that log height in proportion to the categories' shares of the total.
    """
    parts = t[[f"{c}_pct" for c in CATEGORIES]].to_numpy()
    if log:
        total = parts.sum(axis=1, keepdims=True)
        shares = np.divide(parts, total, out=np.zeros_like(parts), where=total > 0)
        edges = floor * (np.maximum(total, floor) / floor) ** np.cumsum(shares, axis=1)
        edges = np.hstack([np.full_like(total, floor), edges])
    else:
        edges = np.hstack([np.zeros((len(parts), 1)), np.cumsum(parts, axis=1)])
    return {c: (edges[:, i], edges[:, i + 1] - edges[:, i]) for i, c in enumerate(CATEGORIES)}


def plot(data: RunData, folder, point: int | None = None, scale: str = "auto"):
    """The figure; ``scale`` is ``auto``, ``linear`` or ``log`` (see the module)."""
    t = table(data, point)
    log = log_axis(t, scale)
    width = SINGLE_COLUMN_IN if len(t) <= 4 else DOUBLE_COLUMN_IN
    fig, ax = plt.subplots(figsize=(width, 2.4))
    x = np.arange(len(t))
    positive = t.loc[t["overhead_pct"] > 0, "overhead_pct"]
    floor = 10 ** np.floor(np.log10(positive.min())) if log and len(positive) else 0.0
    widths = np.where(_is_part(t), 0.4, 0.6)
    for c, (bottom, height) in segments(t, log, floor).items():
        ax.bar(
            x,
            height,
            widths,
            bottom=bottom,
            color=CATEGORY_COLORS[c],
            label=LABELS[c],
            edgecolor="white",
            linewidth=0.3,
        )
    _error_bars(data, ax, t)
    _policy_ticks(data, ax, t, x, point)
    ax.set_xlim(-0.6, len(t) - 0.4 if len(t) > 1 else 0.6)
    top = max(t["ci95_high_pct"].fillna(t["overhead_pct"]).max(), t["overhead_pct"].max())
    if log:
        ax.set_yscale("log")
        ax.set_ylim(floor, top * 1.5)
        ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel("overhead (% of failure-free time)\nlog axis; segments in proportion")
    else:
        ax.set_ylim(0, top * 1.1)
        ax.set_ylabel("overhead (% of failure-free time)")
    ax.grid(axis="x", visible=False)
    handles, names = ax.get_legend_handles_labels()
    ax.legend(
        handles[::-1], names[::-1], loc="upper left", bbox_to_anchor=(1.0, 1.0), handlelength=1.0
    )
    ax.set_title(_title(data, t, point))
    return save(fig, t, folder, NAME)


def _error_bars(data: RunData, ax, t: pd.DataFrame) -> None:
    """The mean total and its 95% interval, in the policy's colour and marker (for the
    policies' bars; a part's bar has its total only)."""
    for i, row in t[~_is_part(t)].iterrows():
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


def _policy_ticks(data: RunData, ax, t: pd.DataFrame, x: np.ndarray, point: int | None) -> None:
    """Policy names (with their best sweep setting) in the policies' colours."""
    labels = [data.styles[p].name for p in t["policy"]]
    if data.columns and point is None:
        labels = [
            f"{n}\n" + s.replace(", ", "\n") for n, s in zip(labels, t["setting"], strict=True)
        ]
    parts = t["part"] if "part" in t else pd.Series(np.nan, index=t.index)
    labels = [f"↳ {p}" if isinstance(p, str) else n for n, p in zip(labels, parts, strict=True)]
    ax.set_xticks(
        x, labels, rotation=0 if len(t) <= 4 else 20, ha="center" if len(t) <= 4 else "right"
    )
    for tick, policy in zip(ax.get_xticklabels(), t["policy"], strict=True):
        tick.set_color(data.styles[policy].color)


def _is_part(t: pd.DataFrame) -> np.ndarray:
    """Per bar: whether it is a part of a composed policy."""
    return t["part"].notna().to_numpy() if "part" in t else np.zeros(len(t), dtype=bool)


def _title(data: RunData, t: pd.DataFrame, point: int | None) -> str:
    t = t[~_is_part(t)]
    n = "/".join(str(v) for v in sorted(set(t["n"])))
    where = ""
    if data.columns:
        where = (
            "; each policy at its best point"
            if point is None
            else f"; {data.describe_point(point)}"
        )
    unfinished = int(t["n_unfinished"].sum())
    excluded = f" ({unfinished} unfinished left out)" if unfinished else ""
    return f"{data.scenario_name}: mean of n = {n} replications{excluded}, 95% CI{where}"
