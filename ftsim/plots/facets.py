"""Small multiples: one figure per kind, one panel per value of the sweep's dimensions.

The first faceted dimension runs across the columns and any further ones down the rows (a
single one wraps after ``MAX_COLUMNS``). Panel titles hold the values only; the figure's
title names the keys once. A figure is exactly 3.33 in wide with one column of panels and
7.0 in with more (the documented widths: nothing in the style grows the saved file).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import text_to_path
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ftsim.plots.data import Dimension, RunData
from ftsim.plots.style import DOUBLE_COLUMN_IN, SINGLE_COLUMN_IN

SCALES = ("auto", "linear", "log")
"""Value axis scales a figure may be asked for; ``auto``: :func:`log_scale`."""
SPAN = 10.0
"""``auto`` scale: logarithmic when the largest value exceeds the smallest by this factor
(overheads of 0.5% next to 8%: on a linear axis the small ones are a flat line at 0)."""
MAX_COLUMNS = 4
"""Most panels in a row when one dimension is faceted (more wrap onto further rows)."""
CHAR_IN = 7 * 0.6 / 72
"""Width of an average character at 7 pt (DejaVu Sans), in inches: to wrap titles and size
legends to the figure's width."""
TITLE_SEPARATOR = "; "
LINE_IN = 7 * 1.25 / 72
"""Height of a line of 7 pt text, in inches."""
HANDLE_IN = 0.4
"""Room of a legend entry's handle and the gaps around it, in inches."""
LEGEND_LINE_IN = 7 * 1.6 / 72
"""Height of a row of the legend (7 pt text and its spacing), in inches."""


@dataclass(frozen=True)
class Panel:
    row: int
    col: int
    title: str
    points: tuple[int, ...]


@dataclass(frozen=True)
class Layout:
    panels: tuple[Panel, ...]
    rows: int
    cols: int
    dimensions: tuple[Dimension, ...]

    @property
    def width_in(self) -> float:
        return SINGLE_COLUMN_IN if self.cols == 1 else DOUBLE_COLUMN_IN

    def header(self) -> str:
        """What the panels are, for the figure's title ('' for a single panel)."""
        if not self.dimensions:
            return ""
        names = [d.name for d in self.dimensions]
        if len(names) == 1:
            return f"panels: {names[0]}"
        return f"columns: {names[0]}; rows: {', '.join(names[1:])}"


def layout(
    data: RunData,
    dimensions: list[Dimension],
    points: list[int] | None = None,
    max_columns: int = MAX_COLUMNS,
) -> Layout:
    """Panels for the points (default: all) along ``dimensions`` (none: one panel); a
    single dimension wraps after ``max_columns`` panels."""
    points = sorted(set(data.runs["point"])) if points is None else sorted(points)
    if not dimensions:
        return Layout((Panel(0, 0, "", tuple(points)),), 1, 1, ())
    keys = {p: tuple(data.value_of(p, d) for d in dimensions) for p in points}
    combos = [c for c in _product_order(dimensions) if c in set(keys.values())]
    members = {c: tuple(p for p in points if keys[p] == c) for c in combos}
    titles = {c: TITLE_SEPARATOR.join(Dimension.label(v) for v in c) for c in combos}
    if len(dimensions) == 1:
        n = len(combos)
        cols = math.ceil(n / math.ceil(n / max_columns))
        panels = [Panel(i // cols, i % cols, titles[c], members[c]) for i, c in enumerate(combos)]
        return Layout(tuple(panels), math.ceil(n / cols), cols, tuple(dimensions))
    columns = [v for v in dimensions[0].values if any(c[0] == v for c in combos)]
    rows = list(dict.fromkeys(c[1:] for c in combos))
    panels = [Panel(rows.index(c[1:]), columns.index(c[0]), titles[c], members[c]) for c in combos]
    return Layout(tuple(panels), len(rows), len(columns), tuple(dimensions))


def _product_order(dimensions: list[Dimension]) -> list[tuple]:
    """Every combination of the dimensions' values, rows (later dimensions) slowest."""
    combos = [()]
    for d in dimensions:
        combos = [(*c, v) for v in d.values for c in combos]
    return combos


def figure(
    grid: Layout,
    panel_height_in: float,
    extra_height_in: float = 0.5,
    split: tuple[float, ...] | None = None,
    **subplots,
):
    """The figure and its axes by panel (unused cells of a wrapped row removed);
    ``extra_height_in`` is for the x axis' labels (:func:`title` and :func:`legend` add
    their own height). ``split``: a panel is drawn on several axes side by side, of these
    relative widths, and maps to the tuple of them."""
    k = len(split) if split else 1
    if split:
        subplots["width_ratios"] = list(split) * grid.cols
    fig, axes = plt.subplots(
        grid.rows,
        grid.cols * k,
        figsize=(grid.width_in, grid.rows * panel_height_in + extra_height_in),
        squeeze=False,
        **subplots,
    )
    used = {(p.row, p.col * k + j) for p in grid.panels for j in range(k)}
    for (r, c), ax in _cells(axes):
        if (r, c) not in used:
            ax.remove()
        elif (r + 1, c) not in used:  # the lowest panel of its column shows the x ticks
            ax.xaxis.set_tick_params(labelbottom=True)
    if split:
        return fig, {p: tuple(axes[p.row][p.col * k + j] for j in range(k)) for p in grid.panels}
    return fig, {p: axes[p.row][p.col] for p in grid.panels}


LABEL_CHAR_IN = 8 * 0.6 / 72
"""Room an axis label takes per character (8 pt), in inches: more than its rendered width
(:func:`text_size_pt`), because the label is centred on its panel, which is off the
column's centre (the y tick labels take the column's left), so a label must fit less than
the whole column; measured widths against the column let the PLS figure's label overrun."""


def axis_labels(fig, xlabel: str, ylabel: str) -> None:
    """The x label under the lowest panel of each column (the legend goes below them),
    wrapped when longer than its column is wide ("PLS measured (portion of lost samples)"
    overran a 2.3-in column into the next one's), one y label for all the panels."""
    for ax in fig.axes:
        if lowest(ax, fig.axes):
            column_in = fig.get_figwidth() / ax.get_subplotspec().get_gridspec().ncols
            fits = len(xlabel) * LABEL_CHAR_IN <= column_in
            ax.set_xlabel(xlabel if fits else wrap(xlabel, column_in * 7 / 8))
    fig.supylabel(ylabel, fontsize=8)


def lowest(ax, axes) -> bool:
    """Whether no other panel lies under ``ax`` in its column."""
    mine = ax.get_subplotspec()
    return not any(
        other.get_subplotspec().colspan == mine.colspan
        and other.get_subplotspec().rowspan.start > mine.rowspan.start
        for other in axes
        if other is not ax
    )


def _cells(axes):
    for r, row in enumerate(axes):
        for c, ax in enumerate(row):
            yield (r, c), ax


def wrap(text: str, width_in: float) -> str:
    """``text`` wrapped at blanks to lines that fit ``width_in`` at 7 pt."""
    chars = max(20, int(width_in / CHAR_IN))
    text = text.replace(" = ", "\u00a0=\u00a0")  # keep "n = 20" on one line
    return "\n".join(
        line
        for paragraph in text.split("\n")
        for line in textwrap.wrap(paragraph, chars, break_on_hyphens=False)
    )


def title(fig, width_in: float, *parts: str) -> None:
    """The figure's title: ``parts`` (empty ones left out), one per line, wrapped."""
    text = "\n".join(wrap(p, width_in - 0.1) for p in parts if p)
    fig.suptitle(text, x=0.01, ha="left", fontsize=7)
    _grow(fig, LINE_IN * (text.count("\n") + 1) + 0.04)


def legend(fig, width_in: float, handles=None, labels=None, **options):
    """One legend below the panels (never over data), as many columns as fit the width."""
    if handles is None:
        handles, labels = legend_entries(fig)
    if not handles:
        return None
    columns = legend_columns(labels, width_in)
    lines = max(
        sum(str(label).count("\n") + 1 for label in column)
        for column in _columns(list(labels), columns)
    )
    _grow(fig, LEGEND_LINE_IN * lines + 0.08)
    return fig.legend(handles, labels, loc="outside lower center", ncols=columns, **options)


def legend_columns(labels, width_in: float, most: int | None = None) -> int:
    """The most columns (at most ``most``) in which a legend of ``labels`` fits ``width_in``
    (rows of equal length where they can be: 7 entries in 2 rows are 4 + 3, not 6 + 1)."""
    widths = [max(map(len, str(label).split("\n"))) * CHAR_IN + HANDLE_IN for label in labels]
    n = len(widths)
    rows = math.ceil(n / min(most or n, n))
    while rows < n and _legend_width(widths, math.ceil(n / rows)) > width_in - 0.3:
        rows += 1
    return math.ceil(n / rows)


def _columns(items: list, columns: int) -> list[list]:
    """``items`` in ``columns`` columns as matplotlib's legend lays them out (column by
    column, the first ones one longer when they do not divide evenly)."""
    size, extra = divmod(len(items), columns)
    out, start = [], 0
    for c in range(columns):
        end = start + size + (c < extra)
        out.append(items[start:end])
        start = end
    return out


def _legend_width(widths: list[float], columns: int) -> float:
    """Width of a legend of entries ``widths`` (inches) in ``columns`` columns."""
    return sum(max(column, default=0.0) for column in _columns(widths, columns))


def _grow(fig, inches: float) -> None:
    """Make ``fig`` taller by ``inches`` (for a title or legend outside the panels)."""
    fig.set_figheight(fig.get_figheight() + inches)


def legend_entries(fig):
    """Legend entries of every axes of ``fig``, each label once, in order of appearance."""
    found = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            found.setdefault(label, handle)
    return list(found.values()), list(found)


def log_scale(values, scale: str) -> bool:
    """Whether to draw ``values`` (percentages, a pandas Series) on a log axis: as asked
    (``scale`` ``linear`` or ``log``), or (``auto``) when the positive ones span more than
    :data:`SPAN`×."""
    if scale != "auto":
        return scale == "log"
    positive = values[values > 0]
    return len(positive) > 1 and positive.max() > SPAN * positive.min()


TICK_GAP_PT = 1.5
"""Least room between two tick labels of a log axis, in points."""


class PlainLogLocator(LogLocator):
    """Ticks of a log axis at 1, 2 and 5 of each decade when, as the figure is drawn (its
    panels laid out), their labels do not crowd each other (within :data:`TICK_GAP_PT`),
    else at every decade, else at fewer decades: "0.1" and "0.2", or "1000" and
    "2000", overlapped along a narrow panel's x axis. At least two ticks are shown: on an
    axis less than an inch long matplotlib's own choice at 1, 2 and 5 is none at all."""

    ORDER = (((1.0, 2.0, 5.0), "auto"), ((1.0,), 20), ((1.0,), "auto"))
    """(subs, numticks) tried in turn: 20 ticks are every decade of any axis here."""

    def __call__(self):
        fewer = None  # the most ticks in view, uncrowded, where fewer than two are
        for subs, numticks in self.ORDER:
            self.set_params(subs=subs, numticks=numticks)
            ticks = super().__call__()
            if self._crowded(ticks):
                continue
            if len(self._shown(ticks)) >= 2:
                return ticks
            if fewer is None or len(self._shown(ticks)) > len(self._shown(fewer)):
                fewer = ticks
        return ticks if fewer is None else fewer

    def _shown(self, ticks) -> list[float]:
        low, high = sorted(self.axis.get_view_interval())
        return [v for v in ticks if low <= v <= high]

    def _crowded(self, ticks) -> bool:
        axis = self.axis
        ax = axis.axes
        shown = self._shown(ticks)
        if len(shown) < 2:
            return False
        vertical = axis is ax.yaxis
        size = plt.rcParams["ytick.labelsize" if vertical else "xtick.labelsize"]
        formatter = axis.get_major_formatter()
        points_per_unit = 72 / ax.figure.dpi  # display units to points (PNG, PDF alike)
        spans = []
        for value in shown:
            at = ax.transData.transform((1.0, value) if vertical else (value, 1.0))
            at = at[int(vertical)] * points_per_unit
            width, height = text_size_pt(formatter(value, 0), size)
            half = (height if vertical else width) / 2
            spans.append((at - half, at + half))
        return any(a[1] + TICK_GAP_PT > b[0] for a, b in zip(spans, spans[1:], strict=False))


def text_size_pt(text: str, size) -> tuple[float, float]:
    """Width and height of ``text`` set at font ``size`` (points or a name such as
    "small", as rcParams give it), in points, as any backend renders it."""
    width, height, _ = text_to_path.get_text_width_height_descent(
        text, FontProperties(size=size), ismath=False
    )
    return width, height


def plain_log_ticks(axis) -> None:
    """Ticks of a log ``axis`` (``ax.xaxis`` or ``ax.yaxis``) labelled as plain numbers:
    1, 2, 5, 10, … where there is room for them, else decades (:class:`PlainLogLocator`)."""
    axis.set_major_locator(PlainLogLocator())
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())
