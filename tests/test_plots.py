"""Every figure is drawn from a small stored sweep, and files exist and are non-empty."""

import matplotlib
import numpy as np
import pandas as pd
import pytest

from ftsim.cli import main
from ftsim.plots import plot_run
from ftsim.plots.style import STYLE, PolicyStyle, policy_styles
from ftsim.plots.tradeoff import frontier
from ftsim.policies.registry import BY_KIND
from tests.conftest import SCENARIOS

SMOKE = str(SCENARIOS / "smoke.yaml")
ALL = ("breakdown", "overhead_vs_interval", "accuracy_vs_overhead", "accuracy_vs_pls", "timeline")


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("plots") / "sweep"
    args = ["sweep", SMOKE, "--grid", "policies.*.interval=10 min,20 min,40 min", "--reps", "3"]
    assert main([*args, "--jobs", "1", "-q", "-o", str(out)]) == 0
    return out


def _files(folder, name):
    return [folder / "plots" / f"{name}.{ext}" for ext in ("pdf", "png", "csv")]


def _with_accuracy_columns(folder):
    """Add synthetic co-simulation columns (as the trainer will) to a stored sweep."""
    runs = pd.read_csv(folder / "runs.csv")
    rng = np.random.default_rng(0)
    runs["pls_measured"] = runs["lost_h"] / runs["ideal_h"]
    runs["logloss_delta"] = 0.02 * runs["pls_measured"] + rng.normal(0, 1e-4, len(runs))
    runs.to_csv(folder / "runs.csv", index=False)


@pytest.mark.filterwarnings("error::UserWarning")
def test_every_figure_from_a_sweep_with_accuracy_columns(sweep_dir, capsys):
    _with_accuracy_columns(sweep_dir)
    assert main(["plot", str(sweep_dir)]) == 0
    printed = capsys.readouterr().out
    assert "skipped" not in printed
    for name in ALL:
        for path in _files(sweep_dir, name):
            assert path.stat().st_size > 0, path
    assert (sweep_dir / "plots" / "breakdown.pdf").read_bytes().startswith(b"%PDF")
    interval = pd.read_csv(sweep_dir / "plots" / "overhead_vs_interval.csv")
    assert set(interval["series"]) == {"full", "full_daly", "checkfreq", "daly_model"}
    assert (interval.loc[interval["series"] == "full", "n"] == 3).all()
    breakdown = pd.read_csv(sweep_dir / "plots" / "breakdown.csv")
    parts = breakdown[
        [f"{c}_pct" for c in ("save", "load", "lost", "reschedule", "degraded", "other")]
    ]
    assert np.allclose(parts.sum(axis=1), breakdown["overhead_pct"])


def test_a_plain_run_skips_the_interval_and_accuracy_figures(tmp_path):
    out = tmp_path / "run"
    assert main(["run", SMOKE, "--reps", "2", "-q", "-o", str(out)]) == 0
    outcomes = dict(plot_run(out))
    assert outcomes["overhead_vs_interval"].startswith("skipped: needs a sweep")
    assert outcomes["accuracy_vs_overhead"].startswith("skipped: no logloss_delta")
    assert outcomes["accuracy_vs_pls"].startswith("skipped")
    for name in ("breakdown", "timeline"):
        for path in _files(out, name):
            assert path.stat().st_size > 0, path


def test_plot_refuses_a_folder_without_results(tmp_path, capsys):
    assert main(["plot", str(tmp_path)]) == 2
    assert "no runs.csv" in capsys.readouterr().err


def test_style_sheet_embeds_truetype_fonts():
    style = matplotlib.rc_params_from_file(STYLE, use_default_template=False)
    assert style["pdf.fonttype"] == 42 and style["ps.fonttype"] == 42


def test_policy_styles_come_from_the_registry_and_are_distinct():
    kinds = {"swift": "swift", "full": "full", "mine": "mine", "full_30": "full", "cpr": "cpr"}
    styles = policy_styles(kinds)
    assert (styles["full"].color, styles["full"].name) == (BY_KIND["full"].color, "Full checkpoint")
    assert styles["cpr"] == policy_styles({"cpr": "cpr"})["cpr"]
    assert styles["full_30"].name == "full_30"  # a second label of a kind: its own colour
    assert len({s.color for s in styles.values()}) == len(kinds)
    assert policy_styles(kinds) == styles
    # a label that is not the kind keeps its name, with the kind's colour
    assert policy_styles({"fast": "swift"})["fast"] == PolicyStyle(
        BY_KIND["swift"].color, BY_KIND["swift"].marker, "fast"
    )


def test_frontier_keeps_the_points_nothing_beats_on_both_axes():
    points = pd.DataFrame(
        {"overhead_pct": [1.0, 2.0, 3.0, 2.5], "logloss_delta": [0.5, 0.2, 0.1, 0.3]}
    )
    assert list(frontier(points).index) == [0, 1, 2]
