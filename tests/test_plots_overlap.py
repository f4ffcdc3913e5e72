"""Every figure of every shipped scenario, on a one-key sweep and on a sweep of several keys
with a zip, is drawn with no two text labels overlapping, no label outside the figure and no
legend over a panel (rendered bounding boxes), at exactly the documented width; and the
check does catch an overlap."""

import re

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from ftsim.cli import main
from ftsim.plots import plot_run
from ftsim.plots.collisions import collisions
from ftsim.plots.style import DOUBLE_COLUMN_IN, SINGLE_COLUMN_IN, STYLE, Output
from tests.conftest import SCENARIOS

matplotlib.use("Agg")

INTERVAL_KEYS = {
    "checknrun": ("policies.0.interval", ["30 min", "1 h", "2 h"]),
    "composed": ("policies.0.target_pls", [0.05, 0.1, 0.2]),
    "cpr_pls": ("policies.*.target_pls", [0.05, 0.1, 0.2]),
    "daly": ("policies.0.interval", ["1 h", "2 h", "4 h"]),
    "ecrm_vs_checkpoint": ("policies.0.interval", ["15 min", "30 min", "1 h"]),
    "failure_log_example": ("policies.0.interval", ["30 min", "1 h", "2 h"]),
    "prod50h": ("policies.0.interval", ["30 min", "1 h", "2 h"]),
    "smoke": ("policies.*.interval", ["10 min", "20 min", "40 min"]),
    "swift_logging": ("policies.*.interval", ["3 h", "9 h", "18 h"]),
}
"""Per shipped scenario, a key that sets a checkpoint interval and three values of it."""


def sweeps():
    """(scenario, shape, sweep section): one grid key; or the interval × a seed grid × a
    zip of the storage bandwidths (three dimensions: x, columns, rows)."""
    for name, (key, values) in INTERVAL_KEYS.items():
        yield name, "one key", {"grid": {key: values}, "zip": {}}
        several = {
            "grid": {key: values[:2], "run.seed": [1, 2]},
            "zip": {
                "cluster.storage.write_bandwidth": ["2 GB/s", "4 GB/s"],
                "cluster.storage.read_bandwidth": ["4 GB/s", "8 GB/s"],
            },
        }
        yield name, "several keys and a zip", several


def _section(sweep: dict) -> str:
    """A sweep section as a flow-style YAML mapping for ``--set sweep=…``."""

    def items(mapping):
        return ", ".join(f"{k}: [{', '.join(map(str, v))}]" for k, v in mapping.items())

    return f"{{grid: {{{items(sweep['grid'])}}}, zip: {{{items(sweep['zip'])}}}}}"


def _with_accuracy_columns(folder):
    """Synthetic co-simulation columns (as the trainer writes them), so that the accuracy
    figures are drawn too."""
    runs = pd.read_csv(folder / "runs.csv").copy()  # one block: adding columns is cheap
    rng = np.random.default_rng(0)
    model = runs["pls_model"].fillna(0) if "pls_model" in runs else 0.0
    runs["pls_measured"] = runs["lost_h"] / runs["ideal_h"] + model
    runs["logloss_delta"] = 0.02 * runs["pls_measured"] + rng.normal(0, 1e-4, len(runs))
    runs.to_csv(folder / "runs.csv", index=False)


@pytest.fixture
def checked(monkeypatch):
    """What the collision check finds on every figure, and its width (in), by name; the
    images are not written (``test_saved_files_have_the_documented_widths`` checks those)."""
    found = {}

    def check(self, fig, data, name):
        found[name] = (collisions(fig), fig.get_figwidth())
        plt.close(fig)
        return []

    monkeypatch.setattr(Output, "save", check)
    return found


@pytest.mark.parametrize("scenario,shape,sweep", list(sweeps()), ids=lambda v: str(v)[:24])
@pytest.mark.filterwarnings("error::UserWarning")  # e.g. a layout that collapsed
def test_no_label_overlaps_on_any_figure(scenario, shape, sweep, tmp_path, checked):
    out = tmp_path / "sweep"
    args = ["sweep", str(SCENARIOS / f"{scenario}.yaml"), "--no-trainer", "--reps", "2"]
    args += ["--set", f"sweep={_section(sweep)}", "--jobs", "1", "-q", "-o", str(out)]
    assert main(args) in (0, 3)
    _with_accuracy_columns(out)
    outcomes = dict(plot_run(out))
    drawn = [name for name, outcome in outcomes.items() if not outcome.startswith("skipped")]
    assert {"breakdown", "timeline", "accuracy_vs_overhead"} <= set(drawn), outcomes
    assert not {name: found for name, (found, _) in checked.items() if found}
    for name, (_, width) in checked.items():
        assert width in (SINGLE_COLUMN_IN, DOUBLE_COLUMN_IN), (name, width)


def test_saved_files_have_the_documented_widths(tmp_path):
    """PNG pixels / dpi and the PDF's media box are the figure's width: 3.33 or 7.0 in."""
    out = tmp_path / "sweep"
    args = ["sweep", str(SCENARIOS / "smoke.yaml"), "--reps", "2", "--jobs", "1", "-q"]
    args += ["--grid", "policies.*.interval=10 min,20 min", "--grid", "run.seed=1,2"]
    assert main([*args, "-o", str(out)]) == 0
    plot_run(out, formats="png,pdf,svg")
    widths = {}
    for png in (out / "plots").glob("*.png"):
        widths[png.stem] = Image.open(png).size[0] / 300
        pdf = png.with_suffix(".pdf").read_bytes()
        box = re.search(rb"/MediaBox \[ ?0 0 ([\d.]+) ", pdf)
        assert float(box[1]) / 72 == pytest.approx(widths[png.stem], abs=1e-3)
        svg = png.with_suffix(".svg").read_text()
        assert re.search(r'width="([\d.]+)pt"', svg)[1] == f"{widths[png.stem] * 72:g}"
    assert widths == {
        "breakdown": DOUBLE_COLUMN_IN,  # one panel per seed (an environment point)
        "overhead_vs_interval": DOUBLE_COLUMN_IN,
        "timeline": DOUBLE_COLUMN_IN,
    }


def test_an_injected_overlap_is_caught():
    with plt.style.context(STYLE):
        fig, ax = plt.subplots(figsize=(SINGLE_COLUMN_IN, 2))
        ax.set_title("a title")
        ax.set_xlabel("apart")
        assert collisions(fig) == []
        ax.text(0.5, 0.5, "here", transform=ax.transAxes)
        ax.text(0.5, 0.5, "and here", transform=ax.transAxes)
        assert collisions(fig) == ["labels overlap: 'here' and 'and here'"]
        plt.close(fig)
        fig, ax = plt.subplots(figsize=(SINGLE_COLUMN_IN, 2))
        ax.plot([1, 2], label="data")
        ax.legend(loc="center")  # over the data
        fig.text(0.99, 0.5, "off the edge")
        found = collisions(fig)
        assert "label outside the figure: 'off the edge'" in found
        assert "legend over a panel: 'data', …" in found
        plt.close(fig)


@pytest.mark.filterwarnings("ignore:constrained_layout not applied")  # 30 pt labels
def test_crowded_tick_labels_of_a_real_figure_are_caught(tmp_path, monkeypatch):
    """The breakdown of prod50h with its policy names at 30 pt: they run into each other or,
    as the layout makes room for them, out of the figure; either is found."""
    out = tmp_path / "run"
    args = ["run", str(SCENARIOS / "prod50h.yaml"), "--no-trainer", "--reps", "2", "-q"]
    assert main([*args, "-o", str(out)]) == 0
    found = {}
    real = Output.save

    def crowd(self, fig, data, name):
        if name == "breakdown":
            for label in fig.axes[0].get_yticklabels():
                label.set_fontsize(30)
        found[name] = collisions(fig)
        return real(self, fig, data, name)

    monkeypatch.setattr(Output, "save", crowd)
    plot_run(out, formats="png")
    crowded = ("labels overlap: 'CPR", "label outside the figure: 'CPR")
    assert any(p.startswith(crowded) for p in found["breakdown"]), found["breakdown"]
    assert found["timeline"] == []


def test_a_png_is_matplotlibs_image_in_rgb(tmp_path):
    """The alpha channel of an opaque figure is written away (the files some 10% smaller):
    every pixel is matplotlib's own, and so are the resolution and the text chunk. A
    transparent figure keeps matplotlib's RGBA file."""
    import io

    with plt.style.context(STYLE):
        fig, ax = plt.subplots(figsize=(SINGLE_COLUMN_IN, 2.0))
        ax.plot([0, 1, 2], [1, 3, 2], marker="o")
        ax.set_title("a figure")
        expected = io.BytesIO()
        fig.savefig(expected, format="png", metadata={})
        Output(tmp_path, ("png",)).save(fig, None, "f")
    ours, theirs = Image.open(tmp_path / "f.png"), Image.open(expected)
    assert ours.mode == "RGB" and theirs.mode == "RGBA"
    assert np.array_equal(np.asarray(ours), np.asarray(theirs.convert("RGB")))
    assert ours.info == theirs.info  # dpi and the Software text
    assert (tmp_path / "f.png").stat().st_size < 0.95 * len(expected.getvalue())
    with plt.style.context(STYLE):
        fig, ax = plt.subplots(figsize=(SINGLE_COLUMN_IN, 2.0))
        fig.patch.set_alpha(0.0)
        Output(tmp_path, ("png",)).save(fig, None, "clear")
    assert Image.open(tmp_path / "clear.png").mode == "RGBA"
