"""The frontier figure of ``ftsim advise``: mean overhead against the time model's PLS for
every candidate setting of every policy, each policy's frontier (the candidates no other of
its candidates beats on both), its pick with a 95% interval, and the PLS limit."""

from __future__ import annotations

import io
from pathlib import Path

from ftsim.plots.style import SINGLE_COLUMN_IN, STYLE, policy_styles
from ftsim.plots.tradeoff import frontier

NAME = "frontier"
HEIGHT_IN = 2.8


def frontier_figure(advice):
    """The figure (matplotlib, in ftsim's style; the caller closes it)."""
    import matplotlib.pyplot as plt

    styles = policy_styles({p.policy: p.kind for p in advice.policies})
    with plt.style.context(STYLE):
        fig, ax = plt.subplots(figsize=(SINGLE_COLUMN_IN, HEIGHT_IN))
        for p in advice.policies:
            style = styles[p.policy]
            valid = p.candidates[p.candidates["valid"]]
            valid = valid[valid["n"] > 0]
            if valid.empty:
                continue
            ax.scatter(valid["pls_model_mean"], 100 * valid["overhead_mean"], s=6,
                       color=style.color, alpha=0.35, linewidths=0, zorder=2)  # fmt: skip
            edge = frontier(valid, x="pls_model_mean", y="overhead_mean")
            ax.plot(edge["pls_model_mean"], 100 * edge["overhead_mean"], color=style.color,
                    linewidth=0.8, drawstyle="steps-post", zorder=3, label=style.name)  # fmt: skip
            if p.pick is not None:
                ax.errorbar(p.pick["pls_model_mean"], 100 * p.pick["overhead_mean"],
                            yerr=100 * p.pick["overhead_ci95"], color=style.color,
                            marker=style.marker, markersize=5, markeredgecolor="black",
                            markeredgewidth=0.5, elinewidth=0.8, zorder=4)  # fmt: skip
        if advice.max_pls is not None:
            ax.axvline(advice.max_pls, color="0.3", linewidth=0.6, linestyle="--",
                       label=f"PLS limit {advice.max_pls:g}")  # fmt: skip
        overheads = [100 * p.candidates["overhead_mean"] for p in advice.policies]
        if min(min(o.dropna(), default=1.0) for o in overheads) > 0:
            ax.set_yscale("log")  # candidates span orders of magnitude
        ax.set_xscale("symlog", linthresh=1e-3)  # lossless policies sit at PLS 0
        ax.set_xlim(left=-2e-4)  # room for the markers at 0
        ax.set_xlabel("PLS (time model's pls_model)")
        ax.set_ylabel("overhead (% of failure-free)")
        ax.set_title(f"{advice.scenario}: frontier, pick ± 95% CI (n = {advice.reps})")
        handles, labels = ax.get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=3)
    return fig


def plot_frontier(advice, folder: Path) -> list[Path]:
    """Write ``frontier.pdf`` and ``.png`` (3.33 in wide, the whole figure: no tight box)
    into ``folder``; their paths."""
    import matplotlib.pyplot as plt

    from ftsim.experiments.output import atomic_write_bytes

    fig = frontier_figure(advice)
    paths = []
    for fmt, metadata in (("pdf", {"CreationDate": None}), ("png", {})):
        buffer = io.BytesIO()
        fig.savefig(buffer, format=fmt, metadata=metadata, bbox_inches=None, dpi=300)
        paths.append(folder / f"{NAME}.{fmt}")
        atomic_write_bytes(paths[-1], buffer.getvalue())
    plt.close(fig)
    return paths
