"""Checks on a rendered figure: no two text labels overlap, no text leaves the figure, no
legend covers a panel.

Bounding boxes are the renderer's (``get_window_extent`` after a draw), in pixels, so the
check sees what the saved file shows: tick labels of the ticks in view only, every title,
axis label, legend entry and free text. ``plot`` runs it on every figure and says what it
finds; the tests require it to find nothing on every figure of every shipped scenario.
"""

from __future__ import annotations

from matplotlib.text import Text

TOLERANCE_PX = 0.5
"""Boxes are shrunk by this much before comparing, so that touching is not overlapping."""


def collisions(fig) -> list[str]:
    """What is wrong with ``fig``'s labels, one line each (empty: nothing)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [(t, _box(t, renderer)) for t in drawn_texts(fig)]
    problems = []
    for i, (a, box_a) in enumerate(texts):
        for b, box_b in texts[i + 1 :]:
            if box_a.overlaps(box_b):
                problems.append(f"labels overlap: {_name(a)} and {_name(b)}")
    frame = fig.bbox.expanded(1.0, 1.0).padded(1.0)
    for t, box in texts:
        if not (frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)):
            problems.append(f"label outside the figure: {_name(t)}")
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes)]
    for legend in (g for g in legends if g is not None and g.get_visible()):
        box = legend.get_window_extent(renderer).shrunk(0.99, 0.99)
        for ax in fig.axes:
            if box.overlaps(ax.get_window_extent(renderer)):
                problems.append(f"legend over a panel: {_name(legend.get_texts()[0])}, …")
    return problems


def drawn_texts(fig) -> list[Text]:
    """Every visible, non-empty text of ``fig`` that is drawn (tick labels of ticks in the
    axes' view only)."""
    ticks, shown = set(), []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            span = (high - low) * 1e-9
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                labels = (tick.label1, tick.label2)
                ticks.update(map(id, labels))
                if low - span <= tick.get_loc() <= high + span:
                    shown += [t for t in labels if t.get_visible()]
    others = [t for t in fig.findobj(Text) if id(t) not in ticks]
    return [t for t in dict.fromkeys([*others, *shown]) if t.get_visible() and t.get_text().strip()]


def _box(text: Text, renderer):
    box = text.get_window_extent(renderer)
    return box.padded(-TOLERANCE_PX) if box.width > 2 and box.height > 2 else box


def _name(text: Text) -> str:
    return repr(text.get_text().replace("\n", " ")[:40])
