"""Paper figures from a run folder (``ftsim plot RUN_DIR``), from stored results only.

Each figure is written to ``RUN_DIR/plots/`` as PDF, PNG and the CSV of the plotted
numbers. A figure the folder cannot support (no interval sweep, no accuracy columns) is
skipped with the reason, and so is an overlay a figure is drawn without (the Daly model).

- ``breakdown``: overhead per policy split into save, load, lost, reschedule, degraded,
  other (:mod:`ftsim.plots.breakdown`);
- ``overhead_vs_interval``: overhead against the checkpoint interval with 95% bands and
  the Daly model for ``full`` (:mod:`ftsim.plots.interval`);
- ``accuracy_vs_overhead``: the trade-off frontier (:mod:`ftsim.plots.tradeoff`);
- ``accuracy_vs_pls``: log-loss delta against measured PLS with a fitted line per policy
  (:mod:`ftsim.plots.pls`);
- ``timeline``: the Gantt chart of one replication (:mod:`ftsim.plots.timeline`).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from ftsim.plots import breakdown, interval, pls, timeline, tradeoff  # noqa: E402
from ftsim.plots.data import RunData, Skip  # noqa: E402
from ftsim.plots.style import STYLE  # noqa: E402

FIGURES = (breakdown, interval, tradeoff, pls, timeline)


def plot_run(
    run_dir: Path, point: int | None = None, breakdown_scale: str = "auto"
) -> list[tuple[str, str]]:
    """Draw every figure; returns (figure name, files written or 'skipped: why'), the files
    followed by the overlays left out of the figure and why."""
    data = RunData.load(run_dir)
    folder = Path(run_dir) / "plots"
    options = {breakdown.NAME: {"scale": breakdown_scale}}
    outcomes = []
    with plt.style.context(STYLE):
        for module in FIGURES:
            try:
                paths = module.plot(data, folder, point, **options.get(module.NAME, {}))
            except Skip as why:
                outcomes.append((module.NAME, f"skipped: {why}"))
                continue
            stems = dict.fromkeys(str(p.with_suffix("")) for p in paths)
            notes = "".join(f"; {why}" for why in data.omitted.get(module.NAME, []))
            outcomes.append((module.NAME, ", ".join(stems) + " (.pdf .png .csv)" + notes))
    return outcomes
