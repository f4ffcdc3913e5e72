"""The frontier figure of ``ftsim advise``: mean overhead against the time model's PLS for
every candidate setting of every policy, each policy's frontier (the candidates no other of
its candidates beats on both), its pick with a 95% interval, and the PLS limit. The legend
names each policy's pick (what ran, when CPR fell back to full recovery), and picks that
(nearly) coincide on the axes are drawn nested, the first drawn largest, so that each shows
around the next (CPR-MFU's and CPR-SSU's on prod50h: 0.0455 and 0.0476, 0.35% and 0.40%)."""

from __future__ import annotations

import sys
from pathlib import Path

from ftsim.notices import short_duration
from ftsim.plots import facets
from ftsim.plots.style import SINGLE_COLUMN_IN, STYLE, Output, policy_styles
from ftsim.plots.tradeoff import frontier

NAME = "frontier"
HEIGHT_IN = 2.4
"""Height of the panel and its title, in inches (the legend adds its own)."""
PICK_SIZE = 5
"""A pick's marker size, points (its legend entry's, and the innermost of nested picks)."""
CLOSE = 0.03
"""Picks this close (both coordinates, as a share of the axes as drawn) are drawn nested."""
NEST = 0.5
"""Of nested picks, each is drawn this much larger, as a share of :data:`PICK_SIZE`, than
the one drawn over it."""


def frontier_figure(advice):
    """The figure (matplotlib, in ftsim's style; the caller closes it)."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    styles = policy_styles({p.policy: p.kind for p in advice.policies})
    picks = advice.picks.set_index("policy")
    with plt.style.context(STYLE):
        fig, ax = plt.subplots(figsize=(SINGLE_COLUMN_IN, HEIGHT_IN))
        handles, labels, opened = [], [], False
        for p in advice.policies:
            style = styles[p.policy]
            valid = p.candidates[p.candidates["valid"]]
            if valid.empty:  # (then the table has no measures: no n column)
                continue
            valid = valid[valid["n"] > 0]
            if valid.empty:
                continue
            opened |= _candidates(ax, valid, style, advice.max_memory_overhead)
            edge = frontier(valid, x="pls_model_mean", y="overhead_frac_mean")
            ax.plot(edge["pls_model_mean"], 100 * edge["overhead_frac_mean"], color=style.color,
                    linewidth=0.8, drawstyle="steps-post", zorder=3)  # fmt: skip
            handles.append(Line2D([], [], color=style.color, linewidth=0.8,
                                  marker=style.marker if p.pick is not None else None,
                                  markersize=PICK_SIZE, markeredgecolor="black",
                                  markeredgewidth=0.5))  # fmt: skip
            labels.append(f"{style.name}: {_pick(picks.loc[p.policy])}")
        if advice.max_pls is not None:
            handles.append(ax.axvline(advice.max_pls, color="0.3", linewidth=0.6,
                                      linestyle="--"))  # fmt: skip
            labels.append(f"PLS limit {advice.max_pls:g}")
        if opened:
            handles.append(Line2D([], [], color="0.3", marker="o", markersize=3,
                                  markerfacecolor="none", linestyle="none"))  # fmt: skip
            labels.append(f"candidate over the memory limit ({advice.max_memory_overhead:g})")
        overheads = [  # (a policy none of whose settings is valid has no measures)
            100 * p.candidates["overhead_frac_mean"]
            for p in advice.policies
            if "overhead_frac_mean" in p.candidates
        ]
        if min(min(o.dropna(), default=1.0) for o in overheads) > 0:
            ax.set_yscale("log")  # candidates span orders of magnitude
        ax.set_xscale("symlog", linthresh=1e-3)  # lossless policies sit at PLS 0
        ax.set_xlim(left=-2e-4)  # room for the markers at 0
        _picks(ax, [p for p in advice.policies if p.pick is not None], styles)
        ax.set_xlabel("PLS (time model's pls_model)")
        ax.set_ylabel("overhead (% of failure-free)")
        facets.title(
            fig,
            SINGLE_COLUMN_IN,
            f"{advice.scenario}: every candidate, each policy's frontier and its pick "
            f"(mean ± 95% CI, n = {advice.reps}); limits: {advice.limits()}",
        )
        facets.legend(fig, SINGLE_COLUMN_IN, handles, labels)
    return fig


def _candidates(ax, valid, style, max_memory: float | None) -> bool:
    """A policy's candidates, faint, in its colour and marker (full's faint black and a
    composed policy's grey looked alike as dots); those over the memory limit open.
    Whether any was open."""
    over = (valid["memory_frac"] > max_memory).to_numpy() if max_memory is not None else None
    for outside, mine in valid.groupby(over) if over is not None else [(False, valid)]:
        ax.scatter(mine["pls_model_mean"], 100 * mine["overhead_frac_mean"], s=7,
                   marker=style.marker, color=style.color, alpha=0.4, zorder=2,
                   linewidths=0.5 if outside else 0,
                   facecolors="none" if outside else style.color)  # fmt: skip
    return over is not None and bool(over.any())


def _picks(ax, policies, styles) -> None:
    """Each policy's pick with its 95% interval, nested where picks nearly coincide on the
    axes as drawn (:data:`CLOSE`): in a group of m, the j-th drawn is 1 + NEST (m - 1 - j)
    times :data:`PICK_SIZE`, under the next. The picks are drawn first, so that their
    intervals have set the axes' limits when their closeness is measured."""
    markers = []
    for i, p in enumerate(policies):
        style = styles[p.policy]
        drawn = ax.errorbar(p.pick["pls_model_mean"], 100 * p.pick["overhead_frac_mean"],
                            yerr=100 * p.pick["overhead_frac_ci95_half"], color=style.color,
                            marker=style.marker, markersize=PICK_SIZE, markeredgecolor="black",
                            markeredgewidth=0.5, elinewidth=0.8, zorder=4 + i / 100)  # fmt: skip
        markers.append(drawn.lines[0])
    ax.autoscale_view()
    xy = [(m.get_xdata()[0], m.get_ydata()[0]) for m in markers]
    where = ax.transAxes.inverted().transform(ax.transData.transform(xy)) if xy else []
    groups: list[list[int]] = []
    for i, here in enumerate(where):
        near = [g for g in groups if any(abs(here - where[j]).max() <= CLOSE for j in g)]
        if near:
            near[0].append(i)
        else:
            groups.append([i])
    for g in groups:
        for j, i in enumerate(g):
            markers[i].set_markersize(PICK_SIZE * (1 + NEST * (len(g) - 1 - j)))


def _pick(row) -> str:
    """A policy's pick for the legend: its setting, or what ran instead (CPR's fall-back)."""
    if row["why_none"]:
        return "none within the limits"
    if row["cpr_decision"] == "full":
        return f"fell back to full recovery every {short_duration(3600 * row['interval_h'])}"
    return row["setting"]


def plot_frontier(advice, folder: Path) -> list[Path]:
    """Write ``frontier.pdf`` and ``.png`` (3.33 in wide, the whole figure: no tight box)
    into ``folder``, checked for overlapping labels like every figure of ``plot`` (said on
    standard error); their paths. The numbers are in ``candidates.csv``."""
    import matplotlib.pyplot as plt

    output = Output(Path(folder), ("pdf", "png"))
    with plt.style.context(STYLE):
        paths = output.save(frontier_figure(advice), None, NAME)
    for problem in output.problems.get(NAME, []):
        print(f"ftsim: warning: {NAME}: {problem}", file=sys.stderr)
    return paths
