"""Paper figures from a run folder (``ftsim plot RUN_DIR``), from stored results only.

Each figure is written to ``RUN_DIR/plots/`` (or ``-o DIR``, never a folder holding
results) as PDF and PNG (or the formats asked for) and the CSV of the plotted numbers, one
file per kind: a sweep's other dimensions are panels of it (small multiples,
:mod:`ftsim.plots.facets`). The files are staged and moved into place together, so a full
disk or an interrupt leaves the earlier figures as they were. A figure the
folder cannot support (no interval sweep, no accuracy columns) is skipped with the reason,
and so is an overlay a figure is drawn without (the Daly model). Every figure is checked
for overlapping labels (:mod:`ftsim.plots.collisions`); ``plot`` warns of any it finds.

- ``breakdown``: overhead per policy split into save, load, lost, reschedule, degraded,
  other (:mod:`ftsim.plots.breakdown`);
- ``overhead_vs_interval``: overhead against the checkpoint interval with 95% bands and
  the Daly model for ``full`` (:mod:`ftsim.plots.interval`);
- ``accuracy_vs_overhead``: the trade-off frontier (:mod:`ftsim.plots.tradeoff`);
- ``accuracy_vs_pls``: log-loss delta against measured PLS with a fitted line per policy
  (:mod:`ftsim.plots.pls`);
- ``pls_vs_overhead``: the time model's PLS against overhead, for a timing-only sweep of a
  policy knob other than the interval (:mod:`ftsim.plots.pls_tradeoff`);
- ``timeline``: the Gantt chart of one replication (:mod:`ftsim.plots.timeline`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from ftsim.experiments.folders import (  # noqa: E402
    FolderError,
    check_figures_folder,
    check_results,
)
from ftsim.experiments.lock import locked_folder, settle, writer  # noqa: E402
from ftsim.experiments.output import StagedFolder, writing  # noqa: E402
from ftsim.options import named  # noqa: E402
from ftsim.plots import (  # noqa: E402
    breakdown,
    interval,
    pls,
    pls_tradeoff,
    timeline,
    tradeoff,
)
from ftsim.plots.data import RunData, Skip  # noqa: E402
from ftsim.plots.facets import SCALES  # noqa: E402
from ftsim.plots.style import DEFAULT_FORMATS, FORMATS, STYLE, Output  # noqa: E402

FIGURES = (breakdown, interval, tradeoff, pls, pls_tradeoff, timeline)


class OptionError(ValueError):
    """An option of :func:`plot_run` with a value it cannot use (exit status 2 for ``plot``)."""


def plot_run(
    folder: str | Path,
    out: str | Path | None = None,
    formats: str | Sequence[str] = DEFAULT_FORMATS,
    point: int | None = None,
    quiet: bool = True,
    breakdown_scale: str = "auto",
    max_pls: float | None = None,
    interval_scale: str = "auto",
) -> list[tuple[str, str]]:
    """Draw every figure of the run or sweep in ``folder``; nothing is simulated again.

    ``out``: the folder for the figures (default ``folder/plots``); with ``point`` (one sweep
    point for the breakdown and the timeline) they go to ``out/point_N/``, beside the others,
    never over them. ``formats``: image formats among pdf, png, svg (a list or
    ``"pdf,png"``); the CSV of the plotted numbers is always written. ``max_pls``: the
    breakdown's best point of each policy is its cheapest with a PLS at most this.
    ``breakdown_scale`` and ``interval_scale``: the overhead axis of the breakdown and of
    the interval figure, ``auto`` (logarithmic when the values span more than 10×),
    ``linear`` or ``log``.
    ``quiet=False`` prints a line per figure. Returns (figure name, files written or
    'skipped: why'), the files followed by the overlays left out of the figure and why.

    Checked first, as ``ftsim plot`` does (it calls this): the options (:class:`OptionError`
    naming the first bad one), then the folder (FolderError: not a complete run or sweep folder,
    no such ``point``), after completing the moves of a run killed while making them;
    result files changed since ftsim wrote them are said on standard error and plotted as
    they are.
    """
    folder = Path(folder)
    formats = parse_formats(formats)
    for name, scale in (("breakdown_scale", breakdown_scale), ("interval_scale", interval_scale)):
        if scale not in SCALES:
            raise OptionError(f"{named(name)} must be one of {', '.join(SCALES)} (got {scale!r})")
    if max_pls is not None and not 0 <= max_pls <= 1:  # a portion of the samples
        raise OptionError(f"{named('max_pls')} must be a number from 0 to 1 (got {max_pls:g})")
    settle(folder)  # the moves of a run killed while making them are completed
    holder = writer(folder)
    if holder is not None and not (folder / "runs.csv").exists():
        raise FolderError(
            f"{folder}: another ftsim process{holder} is writing its results there: plot it "
            "once that ends"
        )
    for note in check_results(folder, point):
        print(f"ftsim: {note}", file=sys.stderr)
    data = RunData.load(folder)
    target = Path(out) if out is not None else folder / "plots"
    if point is not None:
        target = target / f"point_{point}"
    check_figures_folder(target)
    options = {
        breakdown.NAME: {"scale": breakdown_scale, "max_pls": max_pls},
        interval.NAME: {"scale": interval_scale},
    }
    outcomes = []
    # one writer at a time; the figures replace the earlier ones all together, or not at all
    with locked_folder(target):
        with StagedFolder(target) as staging, plt.style.context(STYLE):
            output = Output(target, formats, staging=staging)
            for module in FIGURES:
                try:
                    paths = module.plot(data, output, point, **options.get(module.NAME, {}))
                except Skip as why:
                    outcomes.append((module.NAME, f"skipped: {why}"))
                    continue
                stems = dict.fromkeys(str(p.with_suffix("")) for p in paths)
                kinds = " ".join(f".{p.suffix[1:]}" for p in paths)
                notes = "".join(f"; {why}" for why in data.omitted.get(module.NAME, []))
                for problem in output.problems.get(module.NAME, []):
                    print(f"ftsim: warning: {module.NAME}: {problem}", file=sys.stderr)
                outcomes.append((module.NAME, ", ".join(stems) + f" ({kinds})" + notes))
        outcomes = [(name, _without_stale(target, name, said)) for name, said in outcomes]
    if not quiet:
        for name, outcome in outcomes:
            print(f"{name}: {outcome}")
    return outcomes


def _without_stale(folder: Path, name: str, outcome: str) -> str:
    """``outcome``, and for a figure skipped now, its files from an earlier plot removed
    from ``folder`` and said: they were drawn from other results (a sweep rerun with
    ``--force`` over another kept its interval figure beside the new ones)."""
    if not outcome.startswith("skipped: "):
        return outcome
    stale = [folder / f"{name}.{kind}" for kind in (*FORMATS, "csv")]
    stale = [path for path in stale if path.is_file()]
    with writing(folder):
        for path in stale:
            path.unlink()
    if not stale:
        return outcome
    kinds = " ".join(path.suffix for path in stale)
    return f"{outcome}; its files of an earlier plot removed ({kinds})"


def parse_formats(formats: str | Sequence[str]) -> tuple[str, ...]:
    """``"pdf,png"`` or ``["pdf", "png"]`` as a tuple of known formats; OptionError naming
    an unknown one."""
    names = formats.split(",") if isinstance(formats, str) else list(formats)
    names = [n.strip().lower().lstrip(".") for n in names if n.strip()]
    unknown = [n for n in names if n not in FORMATS]
    if unknown or not names:
        listed = ", ".join(unknown) or "(none)"
        raise OptionError(
            f"{named('formats')}: unknown image format {listed}: choose from {', '.join(FORMATS)}"
        )
    return tuple(dict.fromkeys(names))
