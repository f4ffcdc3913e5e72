"""(b) Overhead versus checkpoint interval: one line per policy with its 95% band, and
Daly's closed form overlaid for ``full`` (Daly's expected wall time, and its optimum).

Each point sits at the interval that actually ran (the ``interval_h`` column), not at the
value asked for: CPR with ``fallback`` switches to full recovery at Daly's interval when its
model says that is cheaper. Such fall-backs are drawn apart (a ✕ in the policy's colour,
outside its line) and named in the legend; two requests that ran the same setting are one
point. The dimensions that set an interval are the x axis; every other swept dimension
(failure rates, the cluster, other knobs) is a panel.

The overhead axis is logarithmic when the points span more than 10× (or when asked): full
checkpointing's 8–40% next to CPR's 0.5–3% on prod50h, which a linear axis flattens to a
line at 0. Policies whose lines coincide are one line named after them all; lines that
nearly do (CPR and its MFU and SSU variants on prod50h, 0.05 points apart) are drawn nested,
each visible around the next.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator

from ftsim.options import on_command_line
from ftsim.plots import facets
from ftsim.plots.data import RunData, Skip
from ftsim.plots.style import Output

NAME = "overhead_vs_interval"
MODEL_POLICY = "full"
CLOSE = 0.02
"""Lines this close (at every interval of both, in every panel: a share of the panel's
overhead range as drawn, linear or log) are drawn nested (:func:`_nesting`)."""
NEST = 0.45
"""Of nested lines, each is drawn this much wider (and its markers larger), as a share of
the usual width, than the one drawn over it."""


def model_curve(data: RunData, rows: pd.DataFrame, grid_h: np.ndarray) -> pd.DataFrame:
    """Daly's predicted overhead for ``full`` at the intervals ``grid_h``; Skip says why not.

    δ = save_cost_s, R = mean rescheduling delay + load_cost_s, M = the job's MTBF, all from
    the stored results and the resolved scenario of the first point of ``rows``. The
    rescheduling delay is ``cluster.reschedule``'s mean, or with cluster operations (a
    failure waits for spares or repairs, as they happen to be) the mean wait per failure
    that the runs measured (``reschedule_h`` / ``n_failures``): the model then checks the
    interval's effect, not the operations'.
    """
    from ftsim.scenario.loader import ScenarioError
    from ftsim.sim.failures import job_mtbf_s
    from ftsim.sim.theory import daly_interval_s, daly_wall_s, young_interval_s

    full = rows[rows["kind"] == "full"]
    full = full[full["policy"] == MODEL_POLICY] if MODEL_POLICY in set(full["policy"]) else full
    if full.empty:
        raise Skip("no policy of kind full to compare with")
    if "save_cost_s_mean" not in full:
        raise Skip("the runs have no save_cost_s column")
    first = full.iloc[0]
    try:
        scenario = data.point_scenario(int(first["point"]))
    except ScenarioError as exc:
        where, what = exc.problems[0]
        raise Skip(f"scenario.yaml: {f'{where}: ' if where else ''}{what}") from None
    mtbf = job_mtbf_s(scenario)
    if not np.isfinite(mtbf):
        raise Skip("the scenario has no failures (infinite MTBF)")
    delta, work = first["save_cost_s_mean"], scenario.job.work_s
    waited, how = scenario.cluster.reschedule.expected_s, ""
    if scenario.cluster.operations is not None:  # replacements wait for spares, repairs
        if not first["n_failures_mean"] > 0:
            raise Skip("no failure in the runs to measure the replacements' delay by")
        waited = 3600 * first["reschedule_h_mean"] / first["n_failures_mean"]
        how = " (waits measured)"
    restart = waited + first["load_cost_s_mean"]
    tau = grid_h * 3600
    curve = pd.DataFrame({"interval_h": grid_h})
    curve["overhead_pct"] = [
        100 * (daly_wall_s(work, t, delta, restart, mtbf) / work - 1) for t in tau
    ]
    curve.attrs.update(
        policy=first["policy"],
        daly_h=daly_interval_s(delta, mtbf) / 3600,
        young_h=young_interval_s(delta, mtbf) / 3600,
        daly_pct=100
        * (daly_wall_s(work, daly_interval_s(delta, mtbf), delta, restart, mtbf) / work - 1),
        text=f"δ = {delta:.0f} s, R = {restart:.0f} s{how}, M = {mtbf / 3600:.3g} h",
    )
    return curve


def _layout(data: RunData) -> facets.Layout:
    """Panels over the swept dimensions that do not set an interval."""
    s = data.summary
    if "interval_h_mean" not in s:
        raise Skip("no policy has an interval_h column")
    sweeps = [d for d in data.dimensions if d.sets_interval]
    varying = interval_run(s).groupby(s["policy"], sort=False).nunique()
    if not sweeps or not (varying > 1).any():
        example = (
            "--grid 'policies.*.interval=…'"
            if on_command_line()
            else "grid={'policies.*.interval': […]}"
        )
        raise Skip(f"needs a sweep over the checkpoint interval (e.g. {example})")
    return facets.layout(data, [d for d in data.dimensions if not d.sets_interval])


def interval_run(rows: pd.DataFrame) -> pd.Series:
    """The interval each summary row ran, hours: its ``interval_h``, or for a composition
    the one its parts ran (their ``<part>/interval_h``), NaN if they ran different ones."""
    ran = rows["interval_h_mean"]
    parts = rows[_part_intervals(rows)]
    if parts.empty:
        return ran
    one = parts.max(axis=1).where(parts.nunique(axis=1) == 1)
    return ran.fillna(one)


def points(data: RunData, rows: pd.DataFrame) -> pd.DataFrame:
    """The plotted points of ``rows`` (summary rows): one per policy and interval run, with
    CPR's decision (``partial``, ``full`` for a fall-back, '' for other policies)."""
    t = pd.DataFrame(
        {
            "series": rows["policy"],
            "point": rows["point"],
            "interval_h": interval_run(rows),
            "decision": [
                data.decisions.get((p, q), "")
                for p, q in zip(rows["point"], rows["policy"], strict=True)
            ],
            "overhead_pct": 100 * rows["overhead_frac_mean"],
            "ci95_low_pct": 100 * rows["overhead_frac_ci95_low"],
            "ci95_high_pct": 100 * rows["overhead_frac_ci95_high"],
            "n": rows["n"],
        }
    )
    t["decision"] = t["decision"].fillna("")
    t["asked"] = [data.describe_point(p, q) for p, q in zip(t["point"], t["series"], strict=True)]
    t = t.dropna(subset=["interval_h"])
    return t.drop_duplicates(["series", "interval_h", "decision", "overhead_pct"])


def plot(data: RunData, out: Output, point: int | None = None, scale: str = "auto"):
    """The figure; ``scale`` of the overhead axis: ``auto``, ``linear`` or ``log`` (see the
    module)."""
    grid = _layout(data)
    x_keys = [k for d in data.dimensions if d.sets_interval for k in d.keys]
    along = ", ".join(k for k in x_keys if not k.startswith("policies."))
    fig, axes = facets.figure(grid, 1.7 if grid.cols > 1 else 1.9, 0.4, sharex=True)
    panels = {}
    for panel in axes:
        rows = data.summary[data.summary["point"].isin(panel.points)]
        panels[panel] = rows, points(data, rows)
    names = _names(data, [t for _, t in panels.values()])
    drawn = pd.concat([t for _, t in panels.values()])
    for policy in data.summary["policy"].unique():
        if policy not in set(drawn["series"]):
            data.omit(NAME, f"without {policy}: {_no_interval(data.summary, policy)}")
    log = facets.log_scale(drawn["overhead_pct"], scale)
    widths = _nesting([t for _, t in panels.values()], [p for p, n in names.items() if n], log)
    tables = []
    fell_back = False
    model = {}
    for panel, ax in axes.items():
        rows, t = panels[panel]
        fell_back |= _draw_policies(data, ax, t, names, widths)
        low, high = t["interval_h"].min(), t["interval_h"].max()
        try:
            if along:
                raise Skip(f"{along} varies along the x axis (a zip with the interval)")
            curve = _where_it_ran(model_curve(data, rows, np.geomspace(low, high, 200)), t)
        except Skip as why:
            note = f"without the Daly model: {why}"
            if note not in data.omitted.get(NAME, []):
                data.omit(NAME, note)
        else:
            _draw_model(data, ax, curve, low, high)
            model[panel] = curve.attrs["text"]
            t = pd.concat([t, curve.assign(series="daly_model", point=np.nan)], ignore_index=True)
        tables.append(t.assign(panel=panel.title))
        if grid.panels[1:]:  # the model's inputs wrapped to the panel (they ran into the next)
            said = facets.wrap(model.get(panel, ""), grid.width_in / grid.cols - 0.15)
            ax.set_title("\n".join(x for x in (panel.title, said) if x))
        _overhead_axis(ax, drawn, log)
        _interval_axis(ax, drawn["interval_h"].min(), drawn["interval_h"].max())
    ylabel = "overhead (%, log axis)" if log else "overhead (%)"
    facets.axis_labels(fig, "interval τ run (h of compute)", ylabel)
    table = pd.concat(tables, ignore_index=True)
    n = "/".join(str(int(v)) for v in sorted(set(table["n"].dropna())))
    single = "" if grid.panels[1:] else next(iter(model.values()), "")
    facets.title(
        fig,
        grid.width_in,
        f"{data.scenario_name}: overhead (% of failure-free time) vs interval run; "
        f"n = {n} per point, 95% CI bands",
        single,
        "".join(f"x: {d.name} (a zip)" for d in data.dimensions if d.sets_interval and d.keys[1:]),
        grid.header(),
    )
    handles, labels = facets.legend_entries(fig)
    nested = {names[p] for p, width in widths.items() if width != 1.0}
    handles = [_usual_width(h) if h.get_label() in nested else h for h in handles]
    if fell_back:
        handles.append(_fallback_handle())
        labels.append("fell back to full recovery (at Daly's τ)")
    facets.legend(fig, grid.width_in, handles, labels)
    return out.save(fig, table, NAME)


def _part_intervals(rows: pd.DataFrame) -> list[str]:
    """The columns of the intervals composed policies' parts ran (``<part>/interval_h_mean``)."""
    return [c for c in rows.columns if c.endswith("/interval_h_mean")]


def _no_interval(summary: pd.DataFrame, policy: str) -> str:
    """Why ``policy`` has no point: no interval, or a composition's parts ran several."""
    rows = summary[summary["policy"] == policy]
    parts = [c for c in _part_intervals(rows) if rows[c].notna().any()]
    if parts:
        names = ", ".join(c.removesuffix("_mean") for c in parts)
        return f"its parts ran different intervals ({names})"
    return "it has no checkpoint interval (interval_h)"


def _names(data: RunData, tables: list[pd.DataFrame]) -> dict[str, str | None]:
    """Each policy's legend name; None for a policy drawn as another: policies whose points
    are identical in every panel (intervals, decisions, means and bands: ``full`` and
    ``full_daly`` once ``policies.*.interval`` sets both) are one line, named after them
    all ("Full checkpoint = full_daly"), where the last drawn would hide the others."""
    columns = ["interval_h", "decision", "overhead_pct", "ci95_low_pct", "ci95_high_pct"]
    first_of: dict[tuple, str] = {}
    names: dict[str, str | None] = {}
    for policy, style in data.styles.items():
        key = tuple(
            tuple(map(tuple, t.loc[t["series"] == policy, columns].sort_values(columns).values))
            for t in tables
        )
        first = first_of.setdefault(key, policy)
        if first == policy:
            names[policy] = style.name
        else:  # drawn as ``first``, named with it
            names[policy] = None
            names[first] += f" = {style.name}"
    return names


def _nesting(tables: list[pd.DataFrame], drawn: list[str], log: bool) -> dict[str, float]:
    """The width of each of the ``drawn`` policies' lines and markers, as a share of the
    usual: 1, except for lines that lie within :data:`CLOSE` of a line drawn before them
    (the same intervals, in every panel where either is; on the axis as drawn, ``log`` or
    linear), the last drawn of which hides the others: in each such group of m lines, the
    j-th drawn is 1 + NEST (m - 1 - j) wide, so that every line and marker shows around the
    next one."""
    groups: list[list[str]] = []
    for policy in drawn:
        group = next((g for g in groups if any(_close(tables, policy, q, log) for q in g)), None)
        if group is None:
            groups.append([policy])
        else:
            group.append(policy)
    return {p: 1 + NEST * (len(g) - 1 - j) for g in groups for j, p in enumerate(g)}


def _close(tables: list[pd.DataFrame], a: str, b: str, log: bool) -> bool:
    """Whether the lines of policies ``a`` and ``b`` (points run as asked) have the same
    intervals and lie within :data:`CLOSE` of each other in every panel, on the overhead
    axis as drawn (``log``: in decades, of the panel's range of positive values; linear:
    of its range from 0)."""
    for t in tables:
        asked = t[t["decision"] != "full"]
        values = asked[["overhead_pct", "ci95_high_pct"]].to_numpy().ravel()
        ours, theirs = (asked[asked["series"] == p].sort_values("interval_h") for p in (a, b))
        if ours.empty and theirs.empty:
            continue
        if not np.array_equal(ours["interval_h"].values, theirs["interval_h"].values):
            return False
        y, z = ours["overhead_pct"].values, theirs["overhead_pct"].values
        if log:
            positive = values[values > 0]
            if (y <= 0).any() or (z <= 0).any() or len(positive) < 2:
                return False
            y, z, span = np.log10(y), np.log10(z), np.log10(positive.max() / positive.min())
        else:
            span = np.nanmax(values)
        if not (np.abs(y - z) <= CLOSE * span).all():
            return False
    return True


def _usual_width(line: Line2D) -> Line2D:
    """A legend handle like ``line`` (a nested, wider line) at the usual width and marker
    size, as every other line's entry."""
    twin = Line2D([], [])
    twin.update_from(line)
    twin.set_linewidth(plt.rcParams["lines.linewidth"])
    twin.set_markersize(plt.rcParams["lines.markersize"])
    return twin


def _draw_policies(
    data: RunData, ax, t: pd.DataFrame, names: dict[str, str | None], widths: dict[str, float]
) -> bool:
    """Each policy's line and band through the points it ran as asked (a whisker when they
    are at one interval: ECRM and SWIFT in a sweep of CPR's target had no CI drawn), and its
    fall-backs apart, once for identical policies (``names``), nearly identical ones nested
    (``widths``: :func:`_nesting`); whether there was a fall-back."""
    fell_back = False
    for policy, g in t.groupby("series", sort=False):
        if names[policy] is None:
            continue
        g = g.sort_values("interval_h")
        style = data.styles[policy]
        asked = g[g["decision"] != "full"]
        width = widths.get(policy, 1.0)
        ax.fill_between(
            asked["interval_h"],
            asked["ci95_low_pct"],
            asked["ci95_high_pct"],
            color=style.color,
            alpha=0.18,
            linewidth=0,
        )
        ax.plot(
            asked["interval_h"],
            asked["overhead_pct"],
            color=style.color,
            marker=style.marker,
            markersize=width * plt.rcParams["lines.markersize"],
            linewidth=width * plt.rcParams["lines.linewidth"],
            label=names[policy],
        )
        if asked["interval_h"].nunique() == 1:  # a band through one interval has no width
            _whiskers(ax, asked, color=style.color, linestyle="none", linewidth=0.8, capsize=2)
        back = g[g["decision"] == "full"]
        if len(back):
            fell_back = True
            _whiskers(ax, back, color=style.color, **FALLBACK)
    return fell_back


def _whiskers(ax, points: pd.DataFrame, **style) -> None:
    """The ``points``' overheads with their 95% CIs as error bars, drawn in ``style``."""
    ax.errorbar(
        points["interval_h"],
        points["overhead_pct"],
        yerr=[
            points["overhead_pct"] - points["ci95_low_pct"],
            points["ci95_high_pct"] - points["overhead_pct"],
        ],
        **style,
    )


FALLBACK = {"marker": "x", "markersize": 8, "markeredgewidth": 1.4, "linestyle": "none"}
"""How a CPR point that fell back to full recovery is drawn (no line: it is another strategy)."""


def _fallback_handle():
    return Line2D([], [], color="0.3", **FALLBACK)


def _overhead_axis(ax, drawn: pd.DataFrame, log: bool) -> None:
    """The overhead axis: from 0, or logarithmic over the positive values of the ``drawn``
    points and bands, the bands down to a decade below the least point at most (a band
    reaching 0 or below, or near it, is cut at the axis: a 12-h panel's band down to 0.01%
    stretched every panel four decades below its points)."""
    if not log:
        ax.set_ylim(bottom=0)
        return
    values = drawn[["overhead_pct", "ci95_low_pct", "ci95_high_pct"]].to_numpy().ravel()
    positive = values[values > 0]
    least = drawn.loc[drawn["overhead_pct"] > 0, "overhead_pct"].min()
    ax.set_yscale("log", nonpositive="clip")
    low, high = max(positive.min(), least / 10) / 1.3, ax.get_ylim()[1]
    ax.set_ylim(low, high)
    facets.plain_log_ticks(ax.yaxis)


def _interval_axis(ax, low: float, high: float) -> None:
    """A log axis of hours ticked at powers of 2, and at the intervals ``low`` and ``high``
    (the least and most drawn) when fewer than 3 powers fall between them (1 to 3 h had
    ticks at 1 and 2 only: the points at 3 h sat at a bare tick)."""
    ax.set_xscale("log")
    powers = 2.0 ** np.arange(np.floor(np.log2(low)), np.ceil(np.log2(high)) + 1)
    inside = [x for x in powers if low <= x <= high]
    if len(inside) >= 3:
        ax.xaxis.set_major_locator(LogLocator(base=2))
    else:
        ax.xaxis.set_major_locator(FixedLocator(sorted({low, *inside, high})))
    ax.xaxis.set_major_formatter(FuncFormatter(_hours))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def _draw_model(data: RunData, ax, curve: pd.DataFrame, low: float, high: float) -> None:
    """The Daly curve (dashed) and its optimum τ* (star) when τ* lies in [low, high] hours."""
    color = data.styles[curve.attrs["policy"]].color
    ax.plot(
        curve["interval_h"],
        curve["overhead_pct"],
        color=color,
        linestyle="--",
        linewidth=0.9,
        label=f"{data.styles[curve.attrs['policy']].name}: Daly model",
    )
    tau = curve.attrs["daly_h"]
    if not low * (1 - 1e-9) <= tau <= high * (1 + 1e-9):  # a point run at τ* is at it
        swept = f"{low:.3g}–{high:.3g} h"
        data.omit(NAME, f"without τ*: the Daly optimum {tau:.3g} h is outside {swept}")
        return
    ax.plot(
        tau,
        curve.attrs["daly_pct"],
        color=color,
        marker="*",
        markersize=7,
        markeredgecolor="white",
        markeredgewidth=0.5,
        linestyle="none",
        zorder=5,  # over the points; a CPR fall-back runs at this τ: its larger ✕ shows around
        label="Daly optimum τ*",
    )


MODEL_SPAN = 4.0
"""Least ratio of the longest to the shortest interval the Daly curve is drawn over (when
its policy ran at one interval, a factor of 2 either side)."""


def _where_it_ran(curve: pd.DataFrame, t: pd.DataFrame) -> pd.DataFrame:
    """The Daly ``curve`` (over the panel's intervals) where its policy ran in the panel's
    points ``t``, with its optimum τ*, at least :data:`MODEL_SPAN` wide. Drawn over
    intervals only other policies ran, a model of full checkpointing set the overhead axis
    where no full checkpointing ran (a sweep of CPR's target: full at 46 min, CPR up to
    18 h, the curve at 200%)."""
    ran = t.loc[t["series"] == curve.attrs["policy"], "interval_h"]
    if ran.empty:
        return curve
    low, high = ran.min(), ran.max()
    if curve.attrs["daly_h"] == curve.attrs["daly_h"]:
        low, high = min(low, curve.attrs["daly_h"]), max(high, curve.attrs["daly_h"])
    widen = math.sqrt(max(1.0, MODEL_SPAN / (high / low)))
    x = curve["interval_h"]
    kept = curve[(x >= low / widen * (1 - 1e-9)) & (x <= high * widen * (1 + 1e-9))]
    kept.attrs = dict(curve.attrs)
    return kept


def _hours(value: float, _) -> str:
    return f"{value:g}" if value >= 1 else f"{value:.2g}"
