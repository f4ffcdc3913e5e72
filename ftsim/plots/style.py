"""Figure conventions: the style sheet, column widths, and one colour and marker per policy.

Policy colours are Okabe–Ito (colour-blind safe) and come from the policy registry
(:mod:`ftsim.policies.registry`): the first label of each registered kind gets its kind's
colour, marker and display name; any other label takes the next free colour in the order of
the run's policies, so a policy looks the same in every figure of a run. Time categories
(save, load, …) use Paul Tol's light palette, distinct from the policy colours.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ftsim.experiments.output import atomic_write_bytes, atomic_write_text, writing
from ftsim.policies.registry import BY_KIND

STYLE = Path(__file__).with_name("ftsim.mplstyle")
SINGLE_COLUMN_IN = 3.33
DOUBLE_COLUMN_IN = 7.0

OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
}

_FALLBACK_COLORS = [
    OKABE_ITO[c]
    for c in (
        "orange",
        "blue",
        "bluish_green",
        "vermillion",
        "reddish_purple",
        "sky_blue",
        "black",
        "yellow",
    )
]
"""Colours for other labels: the unreserved one first, yellow (low contrast) last."""

_FALLBACK_MARKERS = "X<>phd8*"

CATEGORY_COLORS = {
    "compute": "#DDDDDD",
    "save": "#77AADD",
    "load": "#99DDFF",
    "lost": "#EE8866",
    "reschedule": "#EEDD88",
    "degraded": "#FFAABB",
    "other": "#44BB99",
    "persist": "#BBCC33",
}
"""Paul Tol's light palette, one colour per time category (and timeline phase)."""


@dataclass(frozen=True)
class PolicyStyle:
    color: str
    marker: str
    name: str
    """Name in legends and tick labels."""


def policy_styles(kinds: dict[str, str]) -> dict[str, PolicyStyle]:
    """A fixed style per label (``kinds``: label → policy kind, in the run's order).

    The first label of a registered kind takes the kind's colour, marker and (if the label is
    the kind itself) display name from the registry; other labels, in order, take the
    colours that no label of the run has reserved (cycling if there are more than 8).
    """
    styles: dict[str, PolicyStyle] = {}
    for label, kind in kinds.items():
        info = BY_KIND.get(kind)
        if info is not None and all(k != kind for k in (kinds[s] for s in styles)):
            name = info.display_name if label == kind else label
            styles[label] = PolicyStyle(info.color, info.marker, name)
    taken = {s.color for s in styles.values()}
    free = [c for c in _FALLBACK_COLORS if c not in taken] or _FALLBACK_COLORS
    others = [label for label in kinds if label not in styles]
    for i, label in enumerate(others):
        marker = _FALLBACK_MARKERS[i % len(_FALLBACK_MARKERS)]
        styles[label] = PolicyStyle(free[i % len(free)], marker, label)
    return {label: styles[label] for label in kinds}


FORMATS = ("pdf", "png", "svg")
"""Image formats a figure can be written in (besides the CSV of its numbers, always)."""
DEFAULT_FORMATS = ("pdf", "png")
_METADATA = {"pdf": {"CreationDate": None}, "svg": {"Date": None}, "png": {}}
"""No timestamps in the files, so that the same results give the same bytes."""


@dataclass(frozen=True)
class Output:
    """Where figures go and in which formats."""

    folder: Path
    formats: tuple[str, ...] = DEFAULT_FORMATS
    problems: dict[str, list[str]] = field(default_factory=dict)
    """Per figure: what :func:`~ftsim.plots.collisions.collisions` found (``plot`` says it)."""
    staging: Path | None = None
    """Where the files are written until they are moved into ``folder`` all together
    (:class:`ftsim.experiments.output.StagedFolder`); None: into ``folder`` directly."""

    def save(self, fig, data: pd.DataFrame | None, name: str) -> list[Path]:
        """Write ``name`` in each format and ``name``.csv (the plotted numbers; none when
        ``data`` is None), atomically; close the figure. The files are exactly as wide as
        the figure (no tight bbox). Returns their paths in :attr:`folder`."""
        import matplotlib.pyplot as plt

        from ftsim.plots.collisions import collisions

        into = self.staging or self.folder
        with writing(self.folder):
            into.mkdir(parents=True, exist_ok=True)
        names = []
        with warnings.catch_warnings(record=True) as said:  # e.g. a layout that collapsed
            warnings.simplefilter("always")
            found = collisions(fig)  # draws the figure: the layout's warnings come here
            for fmt in self.formats:
                names.append(f"{name}.{fmt}")
                image = _png(fig) if fmt == "png" else _file(fig, fmt)
                atomic_write_bytes(into / names[-1], image)
        plt.close(fig)
        if found:
            self.problems[name] = found
        for message in dict.fromkeys(str(w.message) for w in said):  # one line each, no trace
            self.problems.setdefault(name, []).append(f"matplotlib: {message}")
        if data is not None:  # one line per row: a label's line breaks are the figure's
            names.append(f"{name}.csv")
            flat = data.replace(r"\s*\n\s*", " ", regex=True)
            atomic_write_text(into / names[-1], flat.to_csv(index=False, float_format="%.6g"))
        return [self.folder / n for n in names]


def _file(fig, fmt: str) -> bytes:
    """The figure as a file of format ``fmt``, as matplotlib writes it (without dates)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, metadata=_METADATA[fmt])
    return buffer.getvalue()


def _png(fig) -> bytes:
    """The figure as PNG in RGB, not matplotlib's RGBA: ftsim's figures are opaque (a white
    background), so the alpha channel holds nothing but costs a quarter of the bytes to
    compress (the files are some 10% smaller, encoded once from the rendered pixels; the
    same image, resolution and text chunk). Matplotlib's own file if a pixel is not opaque
    (a transparent figure) or the rendered size is not the one expected."""
    import matplotlib
    import matplotlib.pyplot as plt
    from PIL import Image, PngImagePlugin

    dpi = plt.rcParams["savefig.dpi"]
    dpi = fig.dpi if dpi == "figure" else float(dpi)
    width, height = (int(size * dpi) for size in fig.get_size_inches())
    buffer = io.BytesIO()
    fig.savefig(buffer, format="raw", dpi=dpi)
    pixels = buffer.getvalue()
    if len(pixels) != 4 * width * height:
        return _file(fig, "png")
    image = Image.frombuffer("RGBA", (width, height), pixels, "raw", "RGBA", 0, 1)
    if image.getextrema()[3][0] < 255:
        return _file(fig, "png")
    info = PngImagePlugin.PngInfo()
    info.add_text(
        "Software", f"Matplotlib version{matplotlib.__version__}, https://matplotlib.org/"
    )
    out = io.BytesIO()
    image.convert("RGB").save(out, "png", pnginfo=info, dpi=(dpi, dpi))
    return out.getvalue()
