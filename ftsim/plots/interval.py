"""(b) Overhead versus checkpoint interval: one line per policy with its 95% band, and the
Young/Daly closed form overlaid for ``full`` (Daly's expected wall time, and its optimum)."""

from __future__ import annotations

import math
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator

from ftsim.plots.data import RunData, Skip
from ftsim.plots.style import SINGLE_COLUMN_IN, save

NAME = "overhead_vs_interval"
MODEL_POLICY = "full"
INTERVAL_KEYS = {"interval", "target_pls", "target_accuracy_loss", "pls_slope"}
"""Swept fields that set a policy's checkpoint interval (the x axis, not a separate figure)."""


def _groups(data: RunData) -> list[tuple[str, pd.DataFrame]]:
    """Summary rows per combination of the swept keys other than those setting the interval."""
    s = data.summary
    if "interval_h_mean" not in s:
        raise Skip("no policy has an interval_h column")
    varying = s.groupby("policy", sort=False)["interval_h_mean"].nunique()
    if not (varying > 1).any():
        raise Skip(
            "needs a sweep over the checkpoint interval (e.g. --grid 'policies.*.interval=…')"
        )
    others = [c for c in data.columns if c.rsplit(".", 1)[-1] not in INTERVAL_KEYS]
    if not others:
        return [("", s)]
    return [
        (
            textwrap.fill(
                ", ".join(f"{c.rsplit('.', 1)[-1]}={v}" for c, v in zip(others, key, strict=True)),
                60,
            ),
            g,
        )
        for key, g in s.groupby(others, sort=False)
    ]


def model_curve(data: RunData, rows: pd.DataFrame, grid_h: np.ndarray) -> pd.DataFrame:
    """Daly's predicted overhead for ``full`` at the intervals ``grid_h``; Skip says why not.

    δ = save_cost_s, R = mean rescheduling delay + load_cost_s, M = the job's MTBF, all from
    the stored results and the resolved scenario of the first point of ``rows``.
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
    restart = scenario.cluster.reschedule.expected_s + first["load_cost_s_mean"]
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
        text=f"δ = {delta:.0f} s, R = {restart:.0f} s, M = {mtbf / 3600:.3g} h",
    )
    return curve


def plot(data: RunData, folder, point: int | None = None):
    groups = _groups(data)
    paths = []
    for i, (title, rows) in enumerate(groups):
        name = NAME if len(groups) == 1 else f"{NAME}_{i + 1}"
        paths += _figure(data, rows, title, folder, name)
    return paths


def _figure(data: RunData, rows: pd.DataFrame, title: str, folder, name: str):
    entries = rows["policy"].nunique() + 2
    fig, ax = plt.subplots(figsize=(SINGLE_COLUMN_IN, 2.2 + 0.14 * math.ceil(entries / 2)))
    table = []
    for policy, g in rows.groupby("policy", sort=False):
        g = g.sort_values("interval_h_mean")
        style = data.styles[policy]
        x = g["interval_h_mean"]
        ax.fill_between(
            x,
            100 * g["overhead_frac_ci95_low"],
            100 * g["overhead_frac_ci95_high"],
            color=style.color,
            alpha=0.18,
            linewidth=0,
        )
        ax.plot(
            x,
            100 * g["overhead_frac_mean"],
            color=style.color,
            marker=style.marker,
            label=style.name,
        )
        table.append(
            pd.DataFrame(
                {
                    "series": policy,
                    "interval_h": x,
                    "overhead_pct": 100 * g["overhead_frac_mean"],
                    "ci95_low_pct": 100 * g["overhead_frac_ci95_low"],
                    "ci95_high_pct": 100 * g["overhead_frac_ci95_high"],
                    "n": g["n"],
                }
            )
        )
    low, high = rows["interval_h_mean"].min(), rows["interval_h_mean"].max()
    try:
        curve = model_curve(data, rows, np.geomspace(low, high, 200))
    except Skip as why:
        data.omit(NAME, f"without the Daly model: {why}")
    else:
        _draw_model(data, ax, curve, low, high)
        table.append(curve.assign(series="daly_model", ci95_low_pct=np.nan, ci95_high_pct=np.nan))
        title = ", ".join(t for t in (title, curve.attrs["text"]) if t)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=2))
    ax.xaxis.set_major_formatter(FuncFormatter(_hours))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xlabel("checkpoint interval τ (h of compute)")
    ax.set_ylabel("overhead (% of failure-free time)")
    ax.set_ylim(bottom=0)
    n = "/".join(str(v) for v in sorted(set(rows["n"])))
    ax.set_title(
        f"{data.scenario_name}: n = {n} per point, 95% CI bands" + (f"\n{title}" if title else "")
    )
    fig.legend(loc="outside lower center", ncols=2)
    return save(fig, pd.concat(table, ignore_index=True), folder, name)


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
    if not low <= tau <= high:
        swept = f"{low:.3g}–{high:.3g} h"
        data.omit(NAME, f"without τ*: the Daly optimum {tau:.3g} h is outside {swept}")
        return
    ax.plot(
        tau,
        curve.attrs["daly_pct"],
        color=color,
        marker="*",
        markersize=7,
        linestyle="none",
        label="Daly optimum τ*",
    )


def _hours(value: float, _) -> str:
    return f"{value:g}" if value >= 1 else f"{value:.2g}"
