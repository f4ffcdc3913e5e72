"""(e) Timeline (Gantt) of one replication: one lane per policy showing compute, redone
work, saves, loads, rescheduling, degraded and background phases, and the failures (same
for every policy: common random numbers), at one sweep point: ``--point N``, or in the
first environment point the one where the first policy is cheapest.

Redone work (kind ``redo`` in timeline.csv: compute that re-executes progress a rollback
discarded) is drawn apart from first-time compute, in the colour of the breakdown's
``lost`` category, which is the same time.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch

from ftsim.notices import short_duration
from ftsim.plots import facets
from ftsim.plots.data import RunData, Skip
from ftsim.plots.style import CATEGORY_COLORS, DOUBLE_COLUMN_IN, Output
from ftsim.sim.accounting import LOAD

NAME = "timeline"
LANE = 0.7
"""Height of a lane's bar (lanes are 1 apart)."""
MARGIN = 0.015
"""Room right of the longest lane, as a fraction of it, so its end is seen to be an end."""
PHASES = {
    "compute": ("compute", CATEGORY_COLORS["compute"]),
    "redo": ("redo (lost work re-executed)", CATEGORY_COLORS["lost"]),
    **{
        k: (LOAD if k == "load" else k, c)
        for k, c in CATEGORY_COLORS.items()
        if k not in ("compute", "lost", "other")
    },
}
"""Timeline kinds drawn as bars: legend label and colour. ``lost`` and ``other`` are no
phases: lost time is spent again as ``redo``, and ``other`` slows compute phases down."""
LEGEND_COLUMNS = 6
"""Most legend entries in a row (more, or a row wider than the figure, wrap onto rows of
equal length)."""


FAILURE_COLOR = "0.1"
"""Failure marks: near-black, the colour of no phase and no policy but full's label (in
vermilion, ECRM's colour, 30 failures hid full's redo spans, which are orange-red)."""


def plot(data: RunData, out: Output, point: int | None = None):
    t = data.timeline
    if t.empty:
        raise Skip("timeline.csv is empty")
    point = _best_point(data) if point is None else point
    t = t[(t["point"] == point) & (t["rep"] == t["rep"].min())]
    if t.empty:
        raise Skip(f"no timeline for point {point}")
    policies = [p for p in data.policies if p in set(t["policy"])]
    height = 0.9 + 0.32 * len(policies)
    fig, ax = plt.subplots(figsize=(DOUBLE_COLUMN_IN, height))
    span_h = t["end_h"].max()
    for lane, policy in enumerate(reversed(policies)):
        mine = t[t["policy"] == policy]
        for kind, (_, color) in PHASES.items():
            phases = mine[mine["kind"] == kind]
            if phases.empty:
                continue
            spans = _visible(phases["start_h"], phases["end_h"], span_h)
            # no edge line: 0.4 pt around each of 800 saves of 27 s in 245 h drew them 1.7 px
            # wide, 2.1 px apart, and the lane as all save
            if kind == "persist":  # background: a thin stripe under the lane
                ax.broken_barh(spans, (lane - LANE / 2, LANE / 5), color=color, linewidth=0)
            else:
                lanes = (lane - LANE / 2 + LANE / 5, LANE * 4 / 5)
                ax.broken_barh(spans, lanes, color=color, linewidth=0)
        failures = mine.loc[mine["kind"] == "failure", "start_h"]
        ax.vlines(failures, lane - 0.5, lane + 0.5, color=FAILURE_COLOR, linewidth=0.6)
        ax.plot(
            failures,
            [lane + 0.5] * len(failures),
            color=FAILURE_COLOR,
            marker="x",
            linestyle="none",
            markersize=4,
        )
    ax.set_yticks(range(len(policies)), [data.styles[p].name for p in reversed(policies)])
    for tick, policy in zip(ax.get_yticklabels(), reversed(policies), strict=True):
        tick.set_color(data.styles[policy].color)
    ax.set_ylim(-0.6, len(policies) - 0.4)
    ax.set_xlim(0, t["end_h"].max() * (1 + MARGIN))
    ax.set_xlabel("wall-clock time (h)")
    ax.grid(axis="y", visible=False)
    kinds = [k for k in PHASES if k in set(t["kind"])]
    labels = {k: PHASES[k][0] for k in kinds} | _slowed(data, point, int(t["rep"].iloc[0]))
    handles = [Patch(color=PHASES[k][1], label=labels[k]) for k in kinds]
    handles.append(
        plt.Line2D([], [], color=FAILURE_COLOR, marker="x", markersize=4, label="failure")
    )
    where = data.describe_point(point)
    rep = int(t["rep"].iloc[0])
    title = f"{data.scenario_name}: replication {rep}" + (f", {where}" if where else "")
    facets.title(fig, DOUBLE_COLUMN_IN, title + _fell_back(data, point, policies))
    columns = facets.legend_columns(
        [h.get_label() for h in handles], DOUBLE_COLUMN_IN, LEGEND_COLUMNS
    )
    fig.legend(handles=handles, ncols=columns, loc="outside lower center")
    return out.save(fig, t, NAME)


AXIS_IN = 0.8 * DOUBLE_COLUMN_IN
"""Length of the time axis, about: the figure less the lanes' names."""
MIN_SPAN_IN = 1 / 300
"""Least drawn width of a phase, inches (a pixel of the PNG): a 1 s save or a 16 ms
snapshot in 1,000 h drew nothing, and their cadence could not be seen."""
SPARSE = 4
"""Phases narrower than :data:`MIN_SPAN_IN` are widened to it when they start at least
this many times that apart on average; denser ones are drawn as wide as they last (800
saves of 27 s in 245 h, widened, would draw the lane as all save)."""


def _visible(start_h, end_h, span_h: float) -> list[tuple[float, float]]:
    """(start, width) of each phase, hours: as long as it lasted, or, phases too short for a
    pixel that are sparse enough, a pixel wide (:data:`SPARSE`): their cadence shows, at
    the cost of drawing up to 1/SPARSE of the lane in their colour (200 saves of 10 s in
    100 h, 0.6% of the time, tint some 13% of its pixels)."""
    least = MIN_SPAN_IN * span_h / AXIS_IN
    widths = end_h - start_h
    gap = (start_h.max() - start_h.min()) / (len(start_h) - 1) if len(start_h) > 1 else span_h
    if gap >= SPARSE * least:  # (the mean gap between starts)
        widths = np.maximum(widths, least)
    return list(zip(start_h, widths, strict=True))


def _slowed(data: RunData, point: int, rep: int) -> dict[str, str]:
    """The compute entry's label when background work slowed some policy's compute in this
    replication (``other_h`` > 0: ECRM's parity updates, SWIFT's logs, CheckFreq's persists,
    CPR-MFU/SSU's row tracking), naming them: their lanes are longer with no phase to show
    for it."""
    if not data.has("other_h"):
        return {}
    rows = data.runs[(data.runs["point"] == point) & (data.runs["rep"] == rep)]
    slowed = [data.styles[p].name for p in rows.loc[rows["other_h"] > 0, "policy"]]
    if not slowed:
        return {}
    return {"compute": f"compute (slowed by background work: {', '.join(slowed)})"}


def _fell_back(data: RunData, point: int, policies: list[str]) -> str:
    """``; CPR fell back to full recovery every 58 min`` for each policy that ran full
    recovery instead of the interval the title names ('' if none did)."""
    said = ""
    for policy in policies:
        if data.decisions.get((point, policy)) == "full":
            rows = data.runs[(data.runs["point"] == point) & (data.runs["policy"] == policy)]
            every = short_duration(3600 * rows["interval_h"].iloc[0])
            said += f"; {data.styles[policy].name} fell back to full recovery every {every}"
    return said


def _best_point(data: RunData) -> int:
    """The point of the first environment point (the first value of every swept failure
    rate, cluster or job key) where the first policy has its lowest mean overhead over its
    knobs (the first such point if none of its replications finished). Never the
    environment where it is cheapest: that would be the rarest failures swept."""
    environment = [d for d in data.dimensions if not d.policy_knob]
    first = facets.layout(data, environment).panels[0].points
    s = data.summary[data.summary["point"].isin(first)]
    s = s[s["policy"] == data.policies[0]]
    overhead = s["overhead_frac_mean"]
    return int(s.loc[overhead.idxmin() if overhead.notna().any() else s.index[0], "point"])
