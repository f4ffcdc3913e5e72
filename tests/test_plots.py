"""Every figure is drawn from a small stored sweep, and files exist and are non-empty."""

import matplotlib
import numpy as np
import pandas as pd
import pytest

from ftsim.cli import main
from ftsim.notices import short_duration
from ftsim.plots import plot_run
from ftsim.plots.breakdown import log_axis, segments, shares
from ftsim.plots.collisions import collisions
from ftsim.plots.style import STYLE, PolicyStyle, policy_styles
from ftsim.plots.tradeoff import frontier
from ftsim.policies.registry import BY_KIND
from ftsim.sim.accounting import CATEGORIES, OTHER
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
    printed = capsys.readouterr().out.splitlines()
    assert [line for line in printed if "skipped" in line] == [
        "pls_vs_overhead: skipped: the runs trained the model: accuracy_vs_overhead draws the "
        "measured trade-off"
    ]
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


def test_every_kind_has_its_own_colour_and_marker_and_so_does_the_docs_example():
    """A new user copied the doc's example line, which reused Check-N-Run's colour and the
    composed policy's marker: two policies of one figure looked alike."""
    import re

    from ftsim.policies.registry import POLICIES
    from tests.conftest import ROOT

    doc = (ROOT / "docs" / "adding_a_policy.md").read_text()
    example = re.search(r'PolicyInfo\("reinit_shards", "[^"]+", "(#\w+)", "(\w)"', doc)
    colors = [p.color for p in POLICIES] + [example[1]]
    markers = [p.marker for p in POLICIES] + [example[2]]
    assert len(set(colors)) == len(colors) and len(set(markers)) == len(markers)
    assert "*" not in markers  # the interval figure's tau*


def test_frontier_keeps_the_points_nothing_beats_on_both_axes():
    points = pd.DataFrame(
        {"overhead_pct": [1.0, 2.0, 3.0, 2.5], "logloss_delta": [0.5, 0.2, 0.1, 0.3]}
    )
    assert list(frontier(points).index) == [0, 1, 2]


@pytest.fixture(scope="module")
def prod50h_run(tmp_path_factory):
    """A timing-only prod50h run: overheads from 0.5% (CPR) to 8% (full)."""
    out = tmp_path_factory.mktemp("prod50h") / "run"
    args = ["run", str(SCENARIOS / "prod50h.yaml"), "--no-trainer", "--reps", "2"]
    assert main([*args, "-q", "-o", str(out)]) == 0
    return out


@pytest.fixture
def figures(monkeypatch):
    """The matplotlib figures that are saved, by name: (figure, x scale, x limits)."""
    from ftsim.plots.style import Output

    drawn = {}
    real = Output.save

    def keep(self, fig, data, name):
        drawn[name] = (fig, fig.axes[0].get_xscale(), fig.axes[0].get_xlim())
        drawn[name + "_legend"] = [t.get_text() for t in _legend(fig).get_texts()]
        return real(self, fig, data, name)

    monkeypatch.setattr(Output, "save", keep)
    return drawn


def _legend(fig):
    return fig.legends[0] if fig.legends else fig.axes[0].get_legend()


def test_breakdown_is_on_a_log_axis_when_bars_span_more_than_10x(prod50h_run, figures):
    plot_run(prod50h_run)
    bars = pd.read_csv(prod50h_run / "plots" / "breakdown.csv").set_index("policy")
    assert bars.loc["cpr", "pls_from"] == "pls_model" and bars.loc["cpr", "pls_n"] == 2
    assert pd.isna(bars.loc["full", "pls_from"])  # no PLS column: it loses nothing
    said = [f"every {short_duration(3600 * h)}" for h in bars["interval_h"]]
    assert list(bars["setting"]) == said  # a run's bars name the interval each ran
    assert bars.loc["full", "setting"] != bars.loc["cpr", "setting"]  # Daly's, CPR's plan
    assert figures["breakdown"][1] == "log"
    assert OTHER.replace(": ", ":\n", 1) in figures["breakdown_legend"]
    plot_run(prod50h_run, breakdown_scale="linear")
    assert figures["breakdown"][1] == "linear"


def test_breakdown_scale_segments_and_shares():
    t = pd.DataFrame({f"{c}_pct": [0.25, 4.0] for c in CATEGORIES} | {"overhead_pct": [1.5, 24.0]})
    assert log_axis(t, "auto") and log_axis(t, "log") and not log_axis(t, "linear")
    assert not log_axis(t.assign(overhead_pct=[3.0, 24.0]), "auto")
    parts = t[[f"{c}_pct" for c in CATEGORIES]].to_numpy()
    drawn = segments(parts)
    first, last = drawn[CATEGORIES[0]], drawn[CATEGORIES[-1]]
    assert np.allclose(first[0], 0)
    assert np.allclose(last[0] + last[1], t["overhead_pct"])  # bar ends are the totals
    split = shares(t.assign(save_pct=[0.0, 20.0]))
    assert np.allclose(split.sum(axis=1), 100)
    assert split[1, CATEGORIES.index("save")] == pytest.approx(100 * 20 / 40)
    assert not shares(t.assign(**{f"{c}_pct": 0.0 for c in CATEGORIES})).any()  # no NaN


def test_a_log_breakdown_draws_totals_as_points_and_parts_as_shares(prod50h_run, figures):
    """On a log figure a stack would put its segments' ends off their values: each panel is
    a log axis of points at the totals beside a linear axis of the parts' shares, whose
    bars all end at 100%."""
    plot_run(prod50h_run)
    fig = figures["breakdown"][0]
    totals, stacks = fig.axes
    assert totals.get_xscale() == "log" and stacks.get_xscale() == "linear"
    assert not totals.patches and stacks.get_xlim() == (0, 100)
    bars = pd.read_csv(prod50h_run / "plots" / "breakdown.csv")
    points = [drawn.lines[0].get_xdata()[0] for drawn in totals.containers]  # errorbar's
    assert points == pytest.approx(bars["overhead_pct"].tolist(), rel=1e-5)  # CSV: 6 digits
    ends = {}
    for bar in stacks.patches:
        y = round(bar.get_y() + bar.get_height() / 2)
        ends[y] = max(ends.get(y, 0), bar.get_x() + bar.get_width())
    assert ends == pytest.approx(dict.fromkeys(range(len(bars)), 100.0))
    assert [t.get_text() for t in totals.get_xticklabels() if t.get_text()]  # labelled
    plot_run(prod50h_run, breakdown_scale="linear")
    assert len(figures["breakdown"][0].axes) == 1


def test_timeline_draws_redone_work_and_ends_inside_the_axes(prod50h_run, figures):
    timeline = pd.read_csv(prod50h_run / "timeline.csv")
    runs = pd.read_csv(prod50h_run / "runs.csv")
    redo = timeline[(timeline.policy == "full") & (timeline.kind == "redo")]
    # the engine labels re-executed progress: for full, all of the lost work of replication 0
    lost_h = runs.loc[(runs.policy == "full") & (runs.rep == 0), "lost_h"].item()
    assert len(redo) > 0 and (redo.end_h - redo.start_h).sum() == pytest.approx(lost_h)
    plot_run(prod50h_run)
    assert "redo (lost work re-executed)" in figures["timeline_legend"]
    assert figures["timeline"][2][1] > timeline["end_h"].max()
    drawn = pd.read_csv(prod50h_run / "plots" / "timeline.csv")
    assert (drawn.kind == "redo").sum() == (timeline.kind == "redo").sum()


def test_timeline_spans_are_drawn_as_wide_as_they_last(tmp_path):
    """Saves every 20 min take some 8% of full's lane: drawn with an edge line, each was
    1.7 px wider than it lasted, and the lane read as a quarter save. The pixels of the
    save colour are now about the share of time saving."""
    from PIL import Image

    from ftsim.plots.style import CATEGORY_COLORS

    out = tmp_path / "run"
    args = ["run", str(SCENARIOS / "prod50h.yaml"), "--no-trainer", "--policy", "full"]
    tight = ["--set", "policies.0.interval=20 min", "--reps", "1"]
    assert main([*args, *tight, "-q", "-o", str(out)]) == 0
    plot_run(out, formats="png")
    runs = pd.read_csv(out / "runs.csv").iloc[0]
    share = runs["save_h"] / runs["wall_h"]
    pixels = np.asarray(Image.open(out / "plots" / "timeline.png").convert("RGB"), dtype=float)

    def near(color: str) -> np.ndarray:
        rgb = np.array([int(color[i : i + 2], 16) for i in (1, 3, 5)], dtype=float)
        return np.linalg.norm(pixels - rgb, axis=2) < 30

    save, compute = near(CATEGORY_COLORS["save"]).sum(), near(CATEGORY_COLORS["compute"]).sum()
    drawn = save / (save + compute)
    assert 0.05 < share < 0.12 and drawn < 1.5 * share, (share, drawn)


def test_timeline_phases_too_short_for_a_pixel_show_their_cadence_where_sparse():
    """12 one-second saves in 1,000 h drew 2 ticks, 16 ms snapshots none: sparse phases
    narrower than a pixel are a pixel wide; dense ones (800 saves of 27 s in 245 h) keep
    their width, lest the lane read as all save."""
    from ftsim.plots.timeline import AXIS_IN, MIN_SPAN_IN, _visible

    pixel_h = MIN_SPAN_IN * 1000 / AXIS_IN
    starts = pd.Series(np.linspace(50, 950, 12))
    sparse = _visible(starts, starts + 1 / 3600, 1000)
    assert [w for _, w in sparse] == pytest.approx([pixel_h] * 12)
    dense_starts = pd.Series(np.arange(800) * 0.3)
    dense = _visible(dense_starts, dense_starts + 27 / 3600, 245)
    assert [w for _, w in dense] == pytest.approx([27 / 3600] * 800)


def test_the_daly_overlay_is_drawn_or_its_absence_explained(tmp_path):
    out = tmp_path / "sweep"
    args = ["sweep", str(SCENARIOS / "prod50h.yaml"), "--policy", "full", "--no-trainer"]
    grid = ["--grid", "policies.0.interval=30 min,1 h,2 h", "--reps", "2", "--jobs", "1"]
    assert main([*args, *grid, "-q", "-o", str(out)]) == 0
    saved = out / "scenario.yaml"
    stale = saved.read_text().replace("n_shards: 18", "n_shards: 4")  # folders before the fix
    saved.write_text(stale)
    outcome = dict(plot_run(out))["overhead_vs_interval"]
    assert "without" not in outcome
    curve = pd.read_csv(out / "plots" / "overhead_vs_interval.csv")
    assert "daly_model" in set(curve["series"])
    saved.unlink()
    outcome = dict(plot_run(out))["overhead_vs_interval"]
    assert outcome.endswith("; without the Daly model: scenario.yaml: file not found")


def test_the_breakdown_names_every_part_of_a_composed_policy(tmp_path, figures):
    """A composed policy's bar is followed by one bar per part, labelled with the part's
    name; the parts' bars add up to the policy's bar less its rescheduling."""
    out = tmp_path / "run"
    args = ["run", str(SCENARIOS / "composed.yaml"), "--no-trainer", "--reps", "2"]
    assert main([*args, "-q", "-o", str(out)]) == 0
    plot_run(out)
    t = pd.read_csv(out / "plots" / "breakdown.csv")
    parts = t[t["part"].notna()]
    assert set(parts["part"]) == {"parity", "checkpoint", "logged", "mfu", "cnr"}
    for policy, mine in parts.groupby("policy"):
        whole = t[(t["policy"] == policy) & t["part"].isna()].iloc[0]
        expected = whole["overhead_pct"] - whole["reschedule_pct"]
        assert mine["overhead_pct"].sum() == pytest.approx(expected, rel=1e-5)  # 6 digits
    ticks = [t.get_text() for t in figures["breakdown"][0].axes[0].get_yticklabels()]
    assert {"↳ parity", "↳ checkpoint", "↳ logged", "↳ mfu", "↳ cnr"} <= set(ticks)


@pytest.fixture(scope="module")
def cpr_sweep(tmp_path_factory):
    """prod50h's full and CPR, CPR's target PLS (0.002: it falls back to full recovery) ×
    the failure count (an environment dimension), timing only."""
    out = tmp_path_factory.mktemp("cpr") / "sweep"
    args = ["sweep", str(SCENARIOS / "prod50h.yaml"), "--policy", "full", "--policy", "cpr"]
    args += ["--grid", "policies.1.target_pls=0.002,0.02,0.1", "--grid", "failures.0.count=2,5"]
    assert main([*args, "--no-trainer", "--reps", "2", "--jobs", "1", "-q", "-o", str(out)]) == 0
    return out


def test_interval_points_sit_at_the_interval_run_and_fall_backs_are_marked(cpr_sweep, figures):
    """CPR asked for a tiny target PLS falls back to full recovery at Daly's interval: its
    point is drawn there, as a fall-back (✕, off CPR's line, in the legend); every drawn
    x is an interval that ran."""
    runs = pd.read_csv(cpr_sweep / "runs.csv")
    cpr = runs[runs.policy == "cpr"].groupby("point")[["interval_h", "cpr_decision"]].first()
    assert list(cpr["cpr_decision"]) == ["full", "full"] + ["partial"] * 4
    plot_run(cpr_sweep, formats="png")
    drawn = pd.read_csv(cpr_sweep / "plots" / "overhead_vs_interval.csv")
    points = drawn[drawn.series == "cpr"].set_index("point").sort_index()
    assert points["interval_h"].to_numpy() == pytest.approx(cpr["interval_h"].to_numpy(), rel=1e-5)
    assert list(points["decision"]) == list(cpr["cpr_decision"])
    assert points.loc[0, "asked"] == "target_pls=0.002, count=2"
    fig = figures["overhead_vs_interval"][0]
    assert len(fig.axes) == 2  # a panel per failure count, one file
    assert "fell back to full recovery (at Daly's τ)" in figures["overhead_vs_interval_legend"]
    (line,) = [x for x in fig.axes[0].get_lines() if x.get_label() == "CPR"]
    partial = cpr[(cpr.cpr_decision == "partial") & (cpr.index % 2 == 0)]  # 2 failures
    assert list(line.get_xdata()) == pytest.approx(list(partial["interval_h"]))


def test_the_best_point_is_per_environment_point_over_policy_knobs(cpr_sweep):
    """The breakdown has a panel per failure count; in each, CPR is at its cheapest target
    PLS there (never at another failure count), and within --max-pls when given."""
    summary = pd.read_csv(cpr_sweep / "summary.csv")
    cpr = summary[summary.policy == "cpr"]
    plot_run(cpr_sweep, formats="png")
    t = pd.read_csv(cpr_sweep / "plots" / "breakdown.csv")
    assert list(t["panel"].astype(str)) == ["2", "2", "5", "5"]
    for count, chosen in zip((2, 5), t[t.policy == "cpr"]["point"], strict=True):
        mine = cpr[cpr["failures.0.count"] == count]
        assert chosen == mine.loc[mine["overhead_frac_mean"].idxmin(), "point"]
    limit = cpr["pls_model_mean"].sort_values().iloc[2]  # some settings are over it
    plot_run(cpr_sweep, out=cpr_sweep / "limited", formats="png", max_pls=limit)
    t = pd.read_csv(cpr_sweep / "limited" / "breakdown.csv")
    for count, chosen in zip((2, 5), t[t.policy == "cpr"]["point"], strict=True):
        mine = cpr[(cpr["failures.0.count"] == count) & (cpr["pls_model_mean"] <= limit)]
        assert chosen == mine.loc[mine["overhead_frac_mean"].idxmin(), "point"]
    assert (t[t.policy == "cpr"]["pls"] <= limit * (1 + 1e-5)).all()  # 6 digits in the CSV


def test_point_writes_beside_and_formats_are_chosen(cpr_sweep, capsys):
    assert main(["plot", str(cpr_sweep), "--point", "3", "--format", "svg", "-q"]) == 0
    assert capsys.readouterr().out == ""
    folder = cpr_sweep / "plots" / "point_3"
    assert (folder / "breakdown.svg").exists() and (folder / "breakdown.csv").exists()
    assert not (folder / "breakdown.png").exists()
    t = pd.read_csv(folder / "breakdown.csv")
    assert set(t["point"]) == {3}
    assert main(["plot", str(cpr_sweep), "--format", "pdf,gif"]) == 2
    assert "--format: unknown image format gif" in capsys.readouterr().err


def test_a_fall_back_is_labelled_with_what_ran_never_the_interval_asked(cpr_sweep, figures):
    """Within a PLS limit only full recovery meets (PLS 0), CPR's best point is its
    fall-back: the breakdown names the full recovery it ran at Daly's interval, not the
    target PLS it was asked for; the timeline at that point says so in its title."""
    plot_run(cpr_sweep, out=cpr_sweep / "lossless", formats="png", max_pls=1e-9)
    t = pd.read_csv(cpr_sweep / "lossless" / "breakdown.csv")
    summary = pd.read_csv(cpr_sweep / "summary.csv").set_index(["point", "policy"])
    cpr = t[t.policy == "cpr"]
    assert len(cpr) == 2  # a panel per failure count
    for point, setting in zip(cpr["point"], cpr["setting"], strict=True):
        ran = short_duration(3600 * summary.loc[(point, "cpr"), "interval_h_mean"])
        assert setting == f"fell back to full recovery every {ran}"  # the CSV's, one line
    plot_run(cpr_sweep, out=cpr_sweep / "lossless", formats="png", point=0)
    title = figures["timeline"][0]._suptitle.get_text().replace("\n", " ")
    every = short_duration(3600 * summary.loc[(0, "cpr"), "interval_h_mean"])
    assert title.endswith(f"; CPR fell back to full recovery every {every}")


def test_the_timeline_is_in_the_first_environment_point_never_the_cheapest(tmp_path):
    """Swept failure rates (the most frequent first): the timeline shows the first one, at
    the first policy's cheapest interval there; not the rarest failures, where every policy
    is cheapest."""
    out = tmp_path / "sweep"
    args = ["sweep", SMOKE, "--grid", "policies.*.interval=10 min,40 min"]
    args += ["--grid", "failures.0.job_mtbf=1 h,20 h", "--policy", "full", "--reps", "2"]
    assert main([*args, "--jobs", "1", "-q", "-o", str(out)]) == 0
    summary = pd.read_csv(out / "summary.csv")
    assert summary.loc[summary.overhead_frac_mean.idxmin(), "failures.0.job_mtbf"] == "20 h"
    plot_run(out, formats="png")
    frequent = summary[summary["failures.0.job_mtbf"] == "1 h"]
    best = frequent.loc[frequent.overhead_frac_mean.idxmin(), "point"]
    assert set(pd.read_csv(out / "plots" / "timeline.csv")["point"]) == {best}


def test_a_knob_of_another_policy_is_not_named_in_a_policys_breakdown_label(tmp_path):
    """``policies.0.interval`` changes only policy 0 (full): CPR's bar must not say it chose
    an interval of it, though CPR's paired differences against full (``…_diff_…`` columns)
    do follow that knob (with them in the comparison, CPR was labelled ``interval=2 h``)."""
    out = tmp_path / "sweep"
    args = ["sweep", str(SCENARIOS / "prod50h.yaml"), "--policy", "full", "--policy", "cpr"]
    grid = ["--grid", "policies.0.interval=2 h,8 h", "--reps", "2", "--jobs", "1"]
    assert main([*args, "--no-trainer", *grid, "-q", "-o", str(out)]) == 0
    summary = pd.read_csv(out / "summary.csv")
    cpr = summary[summary["policy"] == "cpr"]
    assert cpr["overhead_frac_diff_mean"].nunique() == 2  # the trap: diffs follow the knob
    plot_run(out)
    t = pd.read_csv(out / "plots" / "breakdown.csv").set_index("policy")
    assert t.loc["full", "setting"] == "interval=2 h"
    assert t.loc["cpr", "setting"] == "every 9 h"  # the interval its plan ran, no knob


def _interval_legend(tmp_path, figures, grid: str) -> tuple[list[str], list[str]]:
    """(legend, policies in the figure's table) of smoke's interval figure over ``grid``
    (smoke: full, full_daly and checkfreq)."""
    out = tmp_path / "sweep"
    args = ["sweep", str(SCENARIOS / "smoke.yaml"), "--grid", grid, "--reps", "3", "-q"]
    assert main([*args, "--jobs", "1", "-o", str(out)]) == 0
    plot_run(out, formats="png")
    drawn = pd.read_csv(out / "plots" / "overhead_vs_interval.csv")
    series = [s for s in dict.fromkeys(drawn["series"]) if s != "daly_model"]
    return figures["overhead_vs_interval_legend"], series


def test_identical_policies_are_one_line_named_after_them_all(tmp_path, figures):
    """``policies.*.interval`` makes full and full_daly the same setting: their rows are
    identical, and the last drawn would hide the other; one line, named after both (the
    table keeps both)."""
    legend, series = _interval_legend(tmp_path, figures, "policies.*.interval=10 min,30 min")
    assert "Full checkpoint = full_daly" in legend and "full_daly" not in legend
    assert series == ["full", "full_daly", "checkfreq"]


def test_policies_that_differ_anywhere_keep_their_own_lines(tmp_path, figures):
    """Only the first policy's interval swept: full_daly runs at Daly's interval, apart."""
    legend, _ = _interval_legend(tmp_path, figures, "policies.0.interval=10 min,30 min")
    assert "Full checkpoint" in legend and "full_daly" in legend
    assert not [name for name in legend if " = " in name]


def test_the_identical_check_fails_when_each_policy_keeps_its_line(tmp_path, figures, monkeypatch):
    """Teeth: with every policy drawn on its own (as before), full_daly is in the legend
    and no entry names two policies."""
    from ftsim.plots import interval

    monkeypatch.setattr(
        interval, "_names", lambda data, _: {p: s.name for p, s in data.styles.items()}
    )
    legend, _ = _interval_legend(tmp_path, figures, "policies.*.interval=10 min,30 min")
    assert "full_daly" in legend and "Full checkpoint = full_daly" not in legend


# -- the interval figure's overhead axis, and lines that nearly coincide -------------------


@pytest.fixture(scope="module")
def cpr_variants(tmp_path_factory):
    """prod50h's full, CPR, CPR-MFU and CPR-SSU over two intervals, timing only: full's
    overhead is 8-20%, the CPR variants' 1-3% and within 0.1 points of each other."""
    out = tmp_path_factory.mktemp("variants") / "sweep"
    policies = [a for p in ("full", "cpr", "cpr_mfu", "cpr_ssu") for a in ("--policy", p)]
    args = ["sweep", str(SCENARIOS / "prod50h.yaml"), *policies, "--no-trainer"]
    grid = ["--grid", "policies.*.interval=1 h,4 h", "--reps", "2", "--jobs", "1"]
    assert main([*args, *grid, "-q", "-o", str(out)]) == 0
    return out


def _y_scale(figures) -> str:
    return figures["overhead_vs_interval"][0].axes[0].get_yscale()


def test_the_interval_figure_is_on_a_log_axis_when_points_span_more_than_10x(
    cpr_variants, sweep_dir, figures
):
    plot_run(cpr_variants, formats="png")
    assert _y_scale(figures) == "log"
    fig = figures["overhead_vs_interval"][0]
    assert fig.get_supylabel() == "overhead (%, log axis)"
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels() if t.get_text()]
    assert "1" in ticks and "10" in ticks  # plain numbers, not powers of ten
    plot_run(cpr_variants, formats="png", interval_scale="linear")
    assert _y_scale(figures) == "linear"
    assert fig is not figures["overhead_vs_interval"][0]
    assert figures["overhead_vs_interval"][0].axes[0].get_ylim()[0] == 0
    plot_run(sweep_dir, formats="png")  # smoke: its policies within 10x of each other
    assert _y_scale(figures) == "linear"
    with pytest.raises(ValueError, match="interval_scale must be one of auto, linear, log"):
        plot_run(sweep_dir, interval_scale="logarithmic")


def _widths(figures) -> dict[str, tuple[float, float]]:
    """(line width, marker size) of each policy's line in the first panel."""
    ax = figures["overhead_vs_interval"][0].axes[0]
    return {
        line.get_label(): (line.get_linewidth(), line.get_markersize())
        for line in ax.get_lines()
        if not line.get_label().startswith(("_", "Daly", "Full checkpoint:"))
    }


def test_nearly_coinciding_lines_are_drawn_nested(cpr_variants, figures):
    """On a linear axis the three CPR lines lie within 2% of the axis of each other and the
    last drawn hid the others: each is drawn wider than the next (markers larger), so every
    one shows; full is apart, at the usual width; the legend shows them all at it."""
    plot_run(cpr_variants, formats="png", interval_scale="linear")
    widths = _widths(figures)
    usual = widths["Full checkpoint"]
    assert widths["CPR"] > widths["CPR-MFU"] > widths["CPR-SSU"] == usual
    fig = figures["overhead_vs_interval"][0]
    entries = {
        t.get_text(): h
        for t, h in zip(_legend(fig).get_texts(), _legend(fig).legend_handles, strict=True)
    }
    assert {entries[name].get_linewidth() for name in ("CPR", "CPR-MFU", "CPR-SSU")} == {usual[0]}


def test_the_nesting_check_fails_when_lines_are_drawn_alike(cpr_variants, figures, monkeypatch):
    """Teeth: with every line at the usual width (as before), the last drawn CPR line hides
    the others and the check above sees equal widths."""
    from ftsim.plots import interval

    monkeypatch.setattr(interval, "_nesting", lambda tables, drawn, log: {})
    plot_run(cpr_variants, formats="png", interval_scale="linear")
    widths = _widths(figures)
    assert not widths["CPR"] > widths["CPR-MFU"] > widths["CPR-SSU"]


def test_nesting_groups_lines_close_on_the_axis_as_drawn():
    """Lines within 2% of the panel's range at every interval are one nested group, on the
    axis as drawn: 0.5 and 0.55 are close on a linear axis up to 40, not on a log axis from
    0.5 to 40 (0.04 of its 1.9 decades)."""
    from ftsim.plots.interval import NEST, _nesting

    def line(series, *values):
        return pd.DataFrame(
            {
                "series": series,
                "interval_h": [1.0, 4.0],
                "decision": "",
                "overhead_pct": values,
                "ci95_high_pct": values,
            }  # fmt: skip
        )

    table = pd.concat([line("a", 0.5, 2.0), line("b", 0.55, 2.1), line("c", 0.5, 2.0),
                       line("d", 10.0, 40.0)])  # fmt: skip
    linear = _nesting([table], ["a", "b", "c", "d"], log=False)
    assert linear == {"a": 1 + 2 * NEST, "b": 1 + NEST, "c": 1.0, "d": 1.0}
    log = _nesting([table], ["a", "b", "c", "d"], log=True)
    assert log == {"a": 1 + NEST, "b": 1.0, "c": 1.0, "d": 1.0}  # a and c only
    other_intervals = pd.concat([table, line("e", 0.5, 2.0).assign(interval_h=[1.0, 2.0])])
    assert _nesting([other_intervals], ["a", "e"], log=False) == {"a": 1.0, "e": 1.0}


def _composed_interval(tmp_path, figures, *grid: str) -> tuple[pd.DataFrame, str, list[str]]:
    """(the interval figure's table, what plot said of it, its x tick labels) of a sweep of
    CPR and ECRM-on-the-hottest-rows + CPR over ``grid``."""
    out = tmp_path / "sweep"
    args = ["sweep", str(SCENARIOS / "composed.yaml"), "--no-trainer"]
    args += [word for key in grid for word in ("--grid", key)]
    policies = ["--policy", "cpr", "--policy", "ecrm_hot.cpr", "--reps", "2", "--jobs", "1"]
    assert main([*args, *policies, "-q", "-o", str(out)]) == 0
    said = dict(plot_run(out, formats="png"))["overhead_vs_interval"]
    ax = figures["overhead_vs_interval"][0].axes[0]
    ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    return pd.read_csv(out / "plots" / "overhead_vs_interval.csv"), said, ticks


def test_a_composition_is_drawn_at_the_interval_its_parts_ran(tmp_path, figures):
    """It has no interval_h of its own: its parts' (both swept here) place it; before, it
    was left out of the figure and nothing said so. Points from 1 to 3 h are ticked at 3
    too (base-2 ticks alone: 1 and 2)."""
    table, said, ticks = _composed_interval(tmp_path, figures, "policies.*.interval=1 h,3 h")
    mine = table[table["series"] == "ecrm_hot.cpr"]
    assert sorted(mine["interval_h"]) == [1.0, 3.0]
    assert "without ecrm_hot.cpr" not in said
    assert ticks == ["1", "2", "3"]


def test_a_composition_whose_parts_ran_different_intervals_is_left_out_and_said(tmp_path, figures):
    part = "policies.2.parts.1.policy.interval=1 h,3 h"  # its parity part keeps 9 h
    table, said, _ = _composed_interval(tmp_path, figures, "policies.0.interval=1 h,3 h", part)
    assert "ecrm_hot.cpr" not in set(table["series"])
    assert (
        "; without ecrm_hot.cpr: its parts ran different intervals "
        "(parity/interval_h, checkpoint/interval_h);" in said
    )


def test_with_cluster_operations_the_daly_overlay_takes_the_waits_the_runs_measured(
    tmp_path, monkeypatch
):
    """A failure waits for a spare or a repair (operations.yaml: manual repairs of 2 days),
    not ``cluster.reschedule`` (1 min): Daly's curve with that R fell far below every
    point; with the runs' mean wait per failure it lies in each point's 95% CI."""
    out = tmp_path / "sweep"
    args = ["sweep", str(SCENARIOS / "operations.yaml"), "--no-trainer", "--policy", "full"]
    grid = ["--grid", "policies.0.interval=30 min,1 h,2 h,4 h", "--reps", "40", "--jobs", "1"]
    assert main([*args, *grid, "-q", "-o", str(out)]) == 0

    def inside() -> bool:
        plot_run(out, formats="png")
        t = pd.read_csv(out / "plots" / "overhead_vs_interval.csv")
        full, model = t[t["series"] == "full"], t[t["series"] == "daly_model"]
        at = np.interp(
            np.log(full["interval_h"]), np.log(model["interval_h"]), model["overhead_pct"]
        )
        return bool(((full["ci95_low_pct"] <= at) & (at <= full["ci95_high_pct"])).all())

    assert inside()
    summary = pd.read_csv(out / "summary.csv").iloc[0]
    waited = 3600 * summary["reschedule_h_mean"] / summary["n_failures_mean"]
    assert waited > 100 * 60  # hours, not the restart's minute
    from ftsim.plots.data import RunData

    real = RunData.point_scenario

    def without_operations(self, point):  # injected bug: the overlay ignores operations
        scenario = real(self, point)
        cluster = scenario.cluster.model_copy(update={"operations": None})
        return scenario.model_copy(update={"cluster": cluster})

    monkeypatch.setattr(RunData, "point_scenario", without_operations)
    assert not inside()


def test_the_daly_models_inputs_wrap_inside_their_panel(tmp_path, capsys):
    """Three panels of an interval sweep with cluster operations: each title's "δ = …, R =
    … s (waits measured), M = … h" ran into the next panel's and off the figure."""
    out = tmp_path / "sweep"
    args = ["sweep", str(SCENARIOS / "operations.yaml"), "--no-trainer", "--policy", "full"]
    grid = ["--grid", "policies.0.interval=1 h,4 h", "--grid", "failures.0.job_mtbf=5 h,10 h,40 h"]
    assert main([*args, *grid, "--reps", "2", "--jobs", "1", "-q", "-o", str(out)]) == 0
    assert main(["plot", str(out), "--format", "png"]) == 0
    assert "overhead_vs_interval: labels overlap" not in capsys.readouterr().err


def test_a_part_far_below_every_policy_does_not_stretch_the_log_axis(tmp_path, figures):
    """Rare failures: CPR's 0.026% is the least policy, the cold rows' part of ECRM-hot +
    CPR 0.003%: the axis starts at 0.01% (the policies' decade, not the part's 0.001%), and
    the part's bar, below it, is its number at the axis' start."""
    out = tmp_path / "run"
    rare = "failures=[{kind: exponential, role: emb_ps, job_mtbf: 100 h}]"
    args = ["run", str(SCENARIOS / "composed.yaml"), "--no-trainer", "--reps", "10"]
    assert main([*args, "--set", rare, "-q", "-o", str(out)]) == 0
    plot_run(out, formats="png")
    t = pd.read_csv(out / "plots" / "breakdown.csv")
    whole = t[t["part"].isna()]["overhead_pct"]
    part = t[t["part"] == "checkpoint"]["overhead_pct"].iloc[0]
    assert part < 0.01 <= whole.min() < 0.1
    fig, scale, (low, _) = figures["breakdown"]
    assert scale == "log" and low == pytest.approx(0.01)
    assert [text.get_text() for text in fig.axes[0].texts] == [f" {part:.2g}%"]


def test_the_pls_figure_says_why_a_policy_has_no_line(tmp_path, figures):
    """Two trained replications: a line through 2 points has r² 1 whatever they are, so
    none is drawn, and the legend said nothing of it (a new user's study)."""
    out = tmp_path / "run"
    assert main(["run", SMOKE, "--reps", "2", "-q", "-o", str(out)]) == 0
    _with_accuracy_columns(out)
    plot_run(out, formats="png")
    legend = figures["accuracy_vs_pls_legend"]
    assert legend and all(label.endswith(": n = 2, no line (< 3 runs)") for label in legend)


def test_the_pls_figure_of_panels_counts_per_panel_and_says_an_empty_one(tmp_path, figures):
    """A new user's three-panel figure said "n = 45 trained reps per policy (all panels)" for
    15 a panel, drew dummy 0-1 axes where no trained replication lost a sample, and left each
    panel's slopes to the CSV."""
    out = tmp_path / "sweep"
    args = ["sweep", SMOKE, "--grid", "policies.*.interval=10 min,40 min", "--reps", "3"]
    args += ["--grid", "failures.0.job_mtbf=1 h,100000 h"]  # the second: no failure
    assert main([*args, "--jobs", "1", "-q", "-o", str(out)]) == 0
    _with_accuracy_columns(out)
    plot_run(out, formats="png")
    fig = figures["accuracy_vs_pls"][0]
    title = fig.get_suptitle().replace("\n", " ").replace("\u00a0", " ")
    assert "n = 6 trained reps per policy and panel" in title
    busy, empty = fig.axes[:2]
    assert [t.get_text() for t in empty.texts] == ["no trained replication\nlost a sample here"]
    slopes = [t.get_text() for t in busy.texts]
    assert slopes and all(": slope " in text and ", r² " in text for text in slopes)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)  # (a saved figure keeps no renderer)
    assert collisions(fig) == []
    assert _points_under_text(fig) == 0  # the slopes were written over the points
    assert len({ax.get_ylim() for ax in fig.axes[:2]}) == 1  # panels share their axes


def _points_under_text(fig) -> int:
    """Data points (markers, lines' ends) of the figure's panels drawn under their texts."""
    import numpy as np

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    hidden = 0
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.texts]
        for line in ax.get_lines():
            xy = ax.transData.transform(np.column_stack(line.get_data()))
            hidden += sum(any(b.contains(x, y) for b in boxes) for x, y in xy)
    return hidden


def test_log_ticks_at_1_2_5_only_where_their_labels_have_room():
    """0.1 to 30 along a 1-in axis: "0.1" and "0.2" would touch, decades only; along 4 in,
    1, 2 and 5 of each decade."""
    import matplotlib.pyplot as plt

    from ftsim.plots.facets import plain_log_ticks

    labels = {}
    for width in (1.0, 4.0):
        fig, ax = plt.subplots(figsize=(width + 1, 2), layout="constrained")
        ax.set_xscale("log")
        ax.set_xlim(0.1, 30)
        plain_log_ticks(ax.xaxis)
        fig.canvas.draw()
        labels[width] = [f"{v:g}" for v in ax.get_xticks() if 0.1 <= v <= 30]
        plt.close(fig)
    assert labels[1.0] == ["0.1", "1", "10"]
    assert labels[4.0] == ["0.1", "0.2", "0.5", "1", "2", "5", "10", "20"]


def test_log_ticks_on_an_axis_too_short_for_matplotlibs_own():
    """Along 0.5 in, matplotlib's locator at 1, 2 and 5 returns no tick at all (a breakdown
    panel's log axis had none): at least two decades are labelled."""
    import matplotlib.pyplot as plt

    from ftsim.plots.facets import plain_log_ticks

    fig, ax = plt.subplots(figsize=(1.5, 2), layout="constrained")
    ax.set_position([0.3, 0.3, 0.5 / 1.5, 0.5])
    fig.set_layout_engine("none")
    ax.set_xscale("log")
    ax.set_xlim(0.1, 20)
    plain_log_ticks(ax.xaxis)
    fig.canvas.draw()
    shown = [f"{v:g}" for v in ax.get_xticks() if 0.1 <= v <= 20]
    plt.close(fig)
    assert len(shown) >= 2 and set(shown) <= {"0.1", "1", "10"}


def test_a_breakdown_of_one_replication_claims_no_ci(tmp_path, figures):
    out = tmp_path / "run"
    assert main(["run", SMOKE, "--reps", "1", "-q", "-o", str(out)]) == 0
    plot_run(out, formats="png")
    title = figures["breakdown"][0].get_suptitle().replace("\n", " ").replace("\u00a0", " ")
    assert "mean of n = 1 replications, no CI from one replication" in title


def test_a_band_near_zero_cuts_at_a_decade_below_the_least_point():
    import matplotlib.pyplot as plt

    from ftsim.plots.interval import _overhead_axis

    drawn = pd.DataFrame(
        {"overhead_pct": [0.5, 20.0], "ci95_low_pct": [1e-4, 15.0], "ci95_high_pct": [1, 25]}
    )
    fig, ax = plt.subplots()
    ax.plot([1, 2], [0.5, 20.0])
    _overhead_axis(ax, drawn, log=True)
    assert ax.get_ylim()[0] == pytest.approx(0.05 / 1.3)  # not 1e-4 / 1.3
    plt.close(fig)


def test_a_pls_fit_needs_three_replications():
    """Through two points r² is 1 whatever they are (a new user's "n = 2, r² = 1.00")."""
    from ftsim.plots.pls import fits

    runs = pd.DataFrame(
        {
            "policy": ["a", "a", "b", "b", "b"],
            "pls_measured": [0.1, 0.2, 0.1, 0.2, 0.3],
            "logloss_delta": [1.0, 3.0, 1.0, 2.0, 3.5],
        }
    )
    table = fits(runs).set_index("policy")
    assert table.loc["a", "n"] == 2 and np.isnan(table.loc["a", "slope"])
    assert table.loc["b", "slope"] == pytest.approx(12.5)
    # the slope's 95% half-width, closed form: t(0.975, n - 2) · sqrt(SSE / (n - 2) / Sxx)
    x, y = np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 3.5])
    sse = np.sum((y - (y.mean() + 12.5 * (x - x.mean()))) ** 2)
    half = 12.7062047 * np.sqrt(sse / 1 / np.sum((x - x.mean()) ** 2))
    assert table.loc["b", "slope_ci95_half"] == pytest.approx(half, rel=1e-6)
    assert np.isnan(table.loc["a", "slope_ci95_half"])


def test_a_policy_repeated_at_several_points_counts_its_replications_once(tmp_path, figures):
    """A sweep of one policy's interval: the others are the same at both points, their rows
    copied; the PLS figure said n = 6 (and fitted them twice) for 3 replications."""
    out = tmp_path / "sweep"
    args = ["sweep", SMOKE, "--grid", "policies.0.interval=10 min,40 min", "--reps", "3"]
    assert main([*args, "--jobs", "1", "-q", "-o", str(out)]) == 0
    runs = pd.read_csv(out / "runs.csv")
    runs["pls_measured"] = runs["lost_h"] / runs["ideal_h"]  # as copied rows: no noise
    runs["logloss_delta"] = 0.02 * runs["pls_measured"] + 1e-3 * runs["rep"]
    runs.to_csv(out / "runs.csv", index=False)
    plot_run(out, formats="png")
    table = pd.read_csv(out / "plots" / "accuracy_vs_pls.csv")
    n = table.groupby("policy")["fit_n"].first().to_dict()
    assert n == {"full": 6, "full_daly": 3, "checkfreq": 3}
    title = figures["accuracy_vs_pls"][0].get_suptitle().replace("\u00a0", " ")
    assert "n = 3/6 trained reps per policy" in title.replace("\n", " ")
    # what each point asked of each policy: the key sets only full's interval
    interval = pd.read_csv(out / "plots" / "overhead_vs_interval.csv", keep_default_na=False)
    asked = interval[interval["series"] != "daly_model"].groupby("series")["asked"].agg(set)
    assert asked.to_dict() == {
        "full": {"interval=10 min", "interval=40 min"},
        "full_daly": {""},
        "checkfreq": {""},
    }


def test_the_daly_curve_is_drawn_where_full_checkpointing_ran(tmp_path, figures):
    """A sweep of CPR's target: full ran at 46 min, CPR up to 18 h; the curve went on to
    18 h, at 200%, and set the overhead axis (a new user's figure)."""
    out = tmp_path / "sweep"
    args = ["sweep", str(SCENARIOS / "prod50h.yaml"), "--policy", "full", "--policy", "cpr"]
    grid = ["--grid", "policies.1.target_pls=0.05,0.4", "--reps", "2", "--no-trainer"]
    assert main([*args, *grid, "--jobs", "1", "-q", "-o", str(out)]) == 0
    plot_run(out, formats="png")
    table = pd.read_csv(out / "plots" / "overhead_vs_interval.csv")
    full = table.loc[table["series"] == "full", "interval_h"]
    curve = table[table["series"] == "daly_model"]
    assert len(full) == 1 and table["interval_h"].max() > 10 * full.max()  # CPR's reach
    assert full.max() <= curve["interval_h"].max() <= 2 * full.max() * 1.001
    assert curve["overhead_pct"].max() < 20
    # full ran one interval: its CI is a whisker there (a band of one point has no width)
    ax = figures["overhead_vs_interval"][0].axes[0]
    whiskers = [c for c in ax.containers if c.has_yerr]
    assert any(c.lines[0].get_xdata()[0] == pytest.approx(full.max()) for c in whiskers)


def test_the_slopes_of_panels_are_written_above_the_points(tmp_path, figures):
    """Points falling to the right, so the highest are at the left, under the slopes."""
    out = tmp_path / "sweep"
    args = ["sweep", SMOKE, "--grid", "failures.0.job_mtbf=1 h,2 h", "--reps", "4"]
    assert main([*args, "--jobs", "1", "-q", "-o", str(out)]) == 0
    runs = pd.read_csv(out / "runs.csv")
    runs["pls_measured"] = 0.01 + runs["lost_h"] / runs["ideal_h"]
    runs["logloss_delta"] = 0.5 - runs["pls_measured"]
    runs.to_csv(out / "runs.csv", index=False)
    plot_run(out, formats="png")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = figures["accuracy_vs_pls"][0]
    FigureCanvasAgg(fig)
    assert _points_under_text(fig) == 0


def _knob_sweep(tmp_path, grid: str):
    """prod50h's CPR and CPR-MFU over ``grid`` (timing only, 2 replications), with
    synthetic accuracy columns so that the trade-off figure is drawn."""
    out = tmp_path / "knob"
    args = ["sweep", str(SCENARIOS / "prod50h.yaml"), "--policy", "cpr", "--policy", "cpr_mfu"]
    args += ["--grid", grid, "--no-trainer", "--reps", "2", "--jobs", "1", "-q", "-o", str(out)]
    assert main(args) == 0
    runs = pd.read_csv(out / "runs.csv")
    runs["pls_measured"] = runs["pls_model"]
    runs["logloss_delta"] = 0.01 * runs["pls_model"]
    runs.to_csv(out / "runs.csv", index=False)
    return out


def test_a_knob_sweep_joins_each_policys_settings_from_a_named_first(tmp_path, figures):
    """A reader of the trade-off figure of ``policies.*.target_pls`` could not tell which
    of a policy's points was which target: each policy's points are joined in the sweep's
    order from a ring at its first setting, which the legend names; the CSV names every
    point's setting."""
    out = _knob_sweep(tmp_path, "policies.*.target_pls=0.2,0.05,0.1")  # not sorted
    plot_run(out, formats="png")
    t = pd.read_csv(out / "plots" / "accuracy_vs_overhead.csv")
    assert list(t.sort_values(["policy", "point"])["setting"]) == [
        "target_pls=0.2", "target_pls=0.05", "target_pls=0.1",
    ] * 2  # fmt: skip
    fig = figures["accuracy_vs_overhead"][0]
    ax = fig.axes[0]
    for policy in ("cpr", "cpr_mfu"):
        mine = t[t.policy == policy].sort_values("point")
        joined = [  # the thin line (the error bars' markers are in that order too)
            line for line in ax.get_lines()
            if line.get_linewidth() == 0.5 and line.get_marker() in (None, "None", "")
            and list(line.get_xdata()) == pytest.approx(list(mine["overhead_pct"]), rel=1e-5)
        ]  # fmt: skip
        assert joined, policy  # in the sweep's order, not the overhead's
        first = mine.iloc[0]
        rings = [
            line for line in ax.get_lines()
            if line.get_marker() == "o"
            and list(line.get_xdata()) == pytest.approx([first["overhead_pct"]], rel=1e-5)
        ]  # fmt: skip
        assert len(rings) == 1 and rings[0].get_markerfacecolor() == "none"
    legend = figures["accuracy_vs_overhead_legend"]
    assert legend.count("target_pls=0.2: where each line starts") == 1


def test_a_knob_of_one_policy_joins_only_that_policys_points(tmp_path, figures):
    out = _knob_sweep(tmp_path, "policies.2.target_pls=0.05,0.1")  # CPR-MFU's
    plot_run(out, formats="png")
    t = pd.read_csv(out / "plots" / "accuracy_vs_overhead.csv")
    assert set(t[t.policy == "cpr"]["setting"].astype(object).fillna("")) == {""}  # CPR is the same
    legend = figures["accuracy_vs_overhead_legend"]
    assert "target_pls=0.05: where each line starts" in legend
    rings = [x for x in figures["accuracy_vs_overhead"][0].axes[0].get_lines()
             if x.get_marker() == "o"]  # fmt: skip
    assert len(rings) == 1


def test_an_environment_sweep_has_no_setting_lines(tmp_path, figures):
    out = _knob_sweep(tmp_path, "failures.0.count=2,5")
    plot_run(out, formats="png")
    t = pd.read_csv(out / "plots" / "accuracy_vs_overhead.csv")
    assert "setting" not in t  # no knob was swept
    assert not any("where each line starts" in x for x in figures["accuracy_vs_overhead_legend"])


def test_the_timeline_names_the_policies_background_work_slowed(prod50h_run, figures):
    """ECRM's lane is longer than CPR's with no phase to show for it: its parity updates
    slow its compute (other_h). The compute entry names the policies slowed so."""
    runs = pd.read_csv(prod50h_run / "runs.csv")
    first = runs[runs["rep"] == runs["rep"].min()]
    names = {info.kind: info.display_name for info in BY_KIND.values()}
    slowed = [names[p] for p in first.loc[first["other_h"] > 0, "policy"]]
    assert "ECRM" in slowed and "CPR" not in slowed
    plot_run(prod50h_run, formats="png")
    label = f"compute (slowed by background work: {', '.join(slowed)})"
    assert label in figures["timeline_legend"]


def test_a_timing_only_sweep_of_a_knob_draws_its_pls_against_overhead(tmp_path, figures):
    """A new user's sweep of CPR-MFU's fraction without the trainer had no figure of the
    knob. pls_vs_overhead draws the time model's PLS against overhead per setting, joined
    in the sweep's order; without the knob, or with the trainer, it says why not."""
    out = tmp_path / "fraction"
    args = ["sweep", str(SCENARIOS / "prod50h.yaml"), "--policy", "full", "--policy", "cpr_mfu"]
    args += ["--grid", "policies.2.fraction=0.2,0.01,0.05", "--no-trainer", "--reps", "2"]
    assert main([*args, "--jobs", "1", "-q", "-o", str(out)]) == 0
    outcomes = dict(plot_run(out, formats="png"))
    assert outcomes["pls_vs_overhead"].endswith("pls_vs_overhead (.png .csv)")
    t = pd.read_csv(out / "plots" / "pls_vs_overhead.csv")
    summary = pd.read_csv(out / "summary.csv").set_index(["point", "policy"])
    full = t[t["policy"] == "full"]  # no pls_model: it loses no updates, drawn at 0
    assert len(full) == 3 and (full["pls_model"] == 0).all() and full["frontier"].any()
    for row in t[t["policy"] == "cpr_mfu"].itertuples():
        mean = summary.loc[(row.point, "cpr_mfu"), "pls_model_mean"]
        assert row.pls_model == pytest.approx(mean, rel=1e-5)  # 6 digits in the CSV
    mfu = t[t["policy"] == "cpr_mfu"].sort_values("point")
    assert list(mfu["setting"]) == [f"fraction={v}" for v in (0.2, 0.01, 0.05)]
    assert "fraction=0.2: where each line starts" in figures["pls_vs_overhead_legend"]
    interval = tmp_path / "interval"
    args[args.index("policies.2.fraction=0.2,0.01,0.05")] = "policies.*.interval=1 h,2 h"
    assert main([*args, "--jobs", "1", "-q", "-o", str(interval)]) == 0
    skipped = dict(plot_run(interval, formats="png"))["pls_vs_overhead"]
    assert skipped.startswith("skipped: needs a timing-only sweep of a policy knob other than")


def test_a_legend_takes_as_many_columns_as_fit_in_rows_of_equal_length():
    """The timeline's 6 entries a row ran out of the figure when the compute entry named the
    policies background work slowed: a row that does not fit wraps."""
    from ftsim.plots.facets import legend_columns

    short = ["compute", "redo", "save", "load", "reschedule", "degraded", "failure"]
    assert legend_columns(short, 7.0, most=6) == 4  # 7 entries: 4 + 3
    assert legend_columns(short, 7.0) == 7
    long = ["compute (slowed by background work: CPR-MFU, CPR-SSU, ECRM)", *short[1:]]
    assert legend_columns(long, 7.0, most=6) == 4
    assert legend_columns(long[:6], 7.0, most=6) == 3  # 6 entries would not fit in one row
    assert legend_columns(["x" * 200], 3.33) == 1


def test_the_frontier_is_drawn_as_a_staircase_from_left_to_right(tmp_path, figures):
    """The frontier line went through its points in the table's order (policy by policy):
    on prod50h, CPR -> CPR-MFU (0.589%) -> back to CPR-SSU (0.535%), a drop drawn at the
    wrong overhead. It runs in the order of overhead."""
    out = _knob_sweep(tmp_path, "policies.*.target_pls=0.05,0.2")
    plot_run(out, formats="png")
    t = pd.read_csv(out / "plots" / "accuracy_vs_overhead.csv")
    [line] = [x for x in figures["accuracy_vs_overhead"][0].axes[0].get_lines()
              if x.get_label() == "frontier"]  # fmt: skip
    xs = list(line.get_xdata())
    assert xs == sorted(xs) and len(xs) == int(t["frontier"].sum()) > 1


def test_settings_of_two_knobs_are_not_joined_in_a_zig_zag(tmp_path, figures):
    """With two knobs of CPR-MFU swept, a line in the sweep's order went back and forth
    across both, and its start's name ran out of the figure; such settings are left
    unjoined (the CSV names them), a one-knob policy's still joined."""
    out = tmp_path / "two"
    args = ["sweep", str(SCENARIOS / "prod50h.yaml"), "--policy", "cpr", "--policy", "cpr_mfu"]
    args += ["--grid", "policies.*.target_pls=0.05,0.2", "--grid", "policies.2.fraction=0.01,0.2"]
    assert main([*args, "--no-trainer", "--reps", "2", "--jobs", "1", "-q", "-o", str(out)]) == 0
    outcomes = dict(plot_run(out, formats="png"))
    assert "pls_vs_overhead (.png .csv)" in outcomes["pls_vs_overhead"]
    t = pd.read_csv(out / "plots" / "pls_vs_overhead.csv")
    assert t.loc[t.policy == "cpr_mfu", "setting"].str.contains(", ").all()
    legend = figures["pls_vs_overhead_legend"]
    assert legend.count("target_pls=0.05: where each line starts") == 1  # CPR's alone
    assert not any("fraction" in entry for entry in legend)


def test_settings_that_ran_alike_are_not_joined_and_panels_share_their_y_axis(tmp_path, figures):
    """CPR-MFU falling back to full recovery at every fraction drew a ring and "where each
    line starts" for a line of no length (my own study); the panels of the failure rates
    had y axes of their own (0.10 and 0.05), read as alike."""
    out = tmp_path / "alike"
    args = ["sweep", str(SCENARIOS / "prod50h.yaml"), "--policy", "cpr", "--policy", "cpr_mfu"]
    args += ["--set", "failures=[{kind: exponential, role: any, job_mtbf: 6 h}]"]
    args += ["--set", "policies.1.trainer_failure=replica"]
    args += ["--grid", "policies.2.fraction=0.01,0.2", "--grid", "failures.0.job_mtbf=3 h,12 h"]
    assert main([*args, "--no-trainer", "--reps", "2", "--jobs", "1", "-q", "-o", str(out)]) == 0
    plot_run(out, formats="png")
    t = pd.read_csv(out / "plots" / "pls_vs_overhead.csv")
    assert (t.loc[t.policy == "cpr_mfu", "pls_model"] == 0).all()  # it fell back each time
    assert not any("where each line starts" in x for x in figures["pls_vs_overhead_legend"])
    left, right = figures["pls_vs_overhead"][0].axes[:2]
    assert left.get_ylim() == right.get_ylim()


def test_daly_optimum_at_the_edge_of_the_intervals_run_is_drawn():
    """τ* computed from the runs' mean save cost differs in its last bits from the interval
    a point ran at τ* ('interval: daly'): it was left out as 'the Daly optimum 0.116 h is
    outside 0.116–4 h' (a new user's sweep)."""
    import matplotlib.pyplot as plt

    from ftsim.plots.interval import _draw_model

    class Data:
        styles = policy_styles({"full": "full"})
        omitted: list = []

        def omit(self, name, note):
            self.omitted.append(note)

    low = 0.116
    curve = pd.DataFrame({"interval_h": [low, 4.0], "overhead_pct": [8.0, 200.0]})
    curve.attrs.update(policy="full", daly_h=low * (1 - 4e-16), daly_pct=8.0)
    fig, ax = plt.subplots()
    data = Data()
    _draw_model(data, ax, curve, low, 4.0)
    assert data.omitted == [] and len(ax.lines) == 2  # the curve and the star
    curve.attrs.update(daly_h=low / 2)
    _draw_model(data, ax, curve, low, 4.0)
    assert data.omitted == ["without τ*: the Daly optimum 0.058 h is outside 0.116–4 h"]
    plt.close(fig)


def test_a_figures_csv_has_one_line_per_row(tmp_path):
    """The breakdown's setting 'fell back to full\\nrecovery every 6.93 min' kept the line
    break the figure's label needs: the CSV had a row across two lines."""
    import matplotlib.pyplot as plt

    from ftsim.plots.style import Output

    out = Output(tmp_path, ("png",))
    fig, _ = plt.subplots()
    table = pd.DataFrame({"setting": ["fell back to full\nrecovery every 6.93 min"], "x": [1.0]})
    out.save(fig, table, "fig")
    lines = (tmp_path / "fig.csv").read_text().splitlines()
    assert lines == ["setting,x", "fell back to full recovery every 6.93 min,1"]


def test_a_pls_interval_is_drawn_down_to_zero_not_below():
    """ECRM's PLS t-interval reached -0.001 on pls_vs_overhead: a PLS cannot be negative,
    so the whisker stops at 0 (the CSV keeps the t-interval)."""
    import matplotlib.pyplot as plt

    from ftsim.plots import tradeoff

    class Data:
        styles = policy_styles({"ecrm": "ecrm"})
        dimensions: list = []

    t = pd.DataFrame({
        "policy": ["ecrm"], "point": [0], "overhead_pct": [2.0], "overhead_ci95_low_pct": [1.9],
        "overhead_ci95_high_pct": [2.1], "pls_model": [0.001], "pls_model_ci95_low": [-0.001],
        "pls_model_ci95_high": [0.003], "frontier": [True],
    })  # fmt: skip
    for floor, lowest in ((0.0, 0.0), (None, -0.001)):
        fig, ax = plt.subplots()
        tradeoff._draw(Data(), ax, t, "pls_model", floor)
        ys = [y for c in ax.collections for seg in c.get_segments() for _, y in seg]
        assert min(ys) == pytest.approx(lowest)
        plt.close(fig)


def test_four_failure_rates_of_trained_runs_make_readable_panels(tmp_path, figures):
    """accuracy_vs_pls in four panels a row collapsed its axes to slivers (each panel writes
    its policies' slopes, wider than a quarter of the figure), and matplotlib's warning went
    to stderr with a source line; accuracy_vs_overhead's panels did not share the overhead
    axis, so positions could not be compared across failure rates (a new user's paper)."""
    out = tmp_path / "rates"
    args = ["sweep", str(SCENARIOS / "prod50h.yaml"), "--policy", "full", "--policy", "cpr"]
    args += ["--policy", "cpr_mfu", "--grid", "failures.0.count=2,5,10,20", "--reps", "3"]
    args += ["--set", "trainer.replications=3", "--set", "trainer.steps=30"]
    assert main([*args, "--jobs", "1", "-q", "-o", str(out)]) == 0
    outcomes = dict(plot_run(out, formats="png"))
    assert outcomes["accuracy_vs_pls"].endswith("accuracy_vs_pls (.png .csv)")  # no problem
    bars = pd.read_csv(out / "plots" / "breakdown.csv")  # its PLS is over the trained reps
    assert set(bars["pls_from"]) == {"pls_measured"} and set(bars["pls_n"]) == {3}
    assert set(bars["n"]) == {3}  # the bars' replications (as many here)
    cpr = bars[bars["policy"] == "cpr"].set_index("panel")["setting"]  # planned per rate
    assert cpr.to_dict() == {
        2: "every 22.5 h",
        5: "every 9 h",
        10: "every 4.5 h",
        20: "every 2.25 h",
    }
    fig = figures["accuracy_vs_pls"][0]
    assert len(fig.axes) == 4 and {ax.get_subplotspec().colspan.start for ax in fig.axes} == {0, 1}
    assert all(ax.get_position().width > 0.3 for ax in fig.axes)  # of the figure's width
    assert fig.axes[0].get_ylabel() == "" and "(nats)" in fig.get_supylabel()
    panels = figures["accuracy_vs_overhead"][0].axes
    assert len({ax.get_xlim() for ax in panels}) == 1  # one overhead axis for all panels


def test_a_matplotlib_warning_while_saving_is_one_of_the_figures_problems(tmp_path, capsys):
    """A layout that collapsed reached stderr as matplotlib's warning with its source line;
    it is now said as the figure's problem, one line, as plot says every problem."""
    import warnings

    import matplotlib.pyplot as plt

    from ftsim.plots.style import Output

    out = Output(tmp_path, ("png",))
    fig, axes = plt.subplots(1, 4, figsize=(3, 1), layout="constrained")
    for ax in axes:
        ax.text(0, 1, "a label far wider than its panel " * 3, transform=ax.transAxes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none escapes
        out.save(fig, None, "squeezed")
    said = [p for p in out.problems["squeezed"] if p.startswith("matplotlib: ")]
    assert said == [
        "matplotlib: constrained_layout not applied because axes sizes collapsed to zero.  "
        "Try making figure larger or Axes decorations smaller."
    ]
    assert capsys.readouterr().err == ""


def test_failure_marks_are_in_no_phase_or_policy_colour(prod50h_run, figures):
    """They were vermilion, ECRM's colour, close to the redo phases they then hid."""
    from matplotlib.colors import to_hex

    from ftsim.plots.style import CATEGORY_COLORS
    from ftsim.plots.timeline import FAILURE_COLOR

    plot_run(prod50h_run, formats="png")
    ax = figures["timeline"][0].axes[0]
    marks = {to_hex(c) for coll in ax.collections if hasattr(coll, "get_segments")
             for c in coll.get_colors()}  # fmt: skip
    assert to_hex(FAILURE_COLOR) in marks
    taken = {to_hex(c) for c in CATEGORY_COLORS.values()}
    taken |= {to_hex(info.color) for info in BY_KIND.values() if info.kind != "full"}
    assert to_hex(FAILURE_COLOR) not in taken


def test_a_figure_skipped_now_leaves_no_file_of_an_earlier_plot(prod50h_run):
    """A sweep rerun with --force over another kept the earlier study's interval figure in
    plots/, beside the new figures, though this plot skips it: it is removed and said."""
    plots = prod50h_run / "plots"
    plots.mkdir(exist_ok=True)
    for kind in ("png", "csv"):
        (plots / f"overhead_vs_interval.{kind}").write_text("another study's")
    outcomes = dict(plot_run(prod50h_run, formats="png"))
    assert outcomes["overhead_vs_interval"].startswith("skipped: needs a sweep over the")
    assert outcomes["overhead_vs_interval"].endswith(
        "its files of an earlier plot removed (.png .csv)"
    )
    assert not list(plots.glob("overhead_vs_interval.*"))
    assert (plots / "breakdown.png").is_file()


def test_plot_reads_only_a_regular_utf8_scenario_yaml(prod50h_run, tmp_path):
    """A FIFO in place of the folder's scenario.yaml hung plot; bytes that are not UTF-8 were
    a UnicodeDecodeError traceback. Either is read as no scenario (the figures that need
    it say so)."""
    import os
    import shutil
    import threading

    copy = tmp_path / "copy"
    shutil.copytree(prod50h_run, copy, ignore=shutil.ignore_patterns("plots"))
    (copy / "scenario.yaml").write_bytes(b"\xff\xfe\x00name")
    assert main(["plot", str(copy), "-q", "--format", "png"]) == 0
    (copy / "scenario.yaml").unlink()
    os.mkfifo(copy / "scenario.yaml")
    done = []
    worker = threading.Thread(target=lambda: done.append(plot_run(copy, formats="png")))
    worker.start()
    worker.join(60)
    if worker.is_alive():  # unblock the reader so that the test ends, then fail
        with open(copy / "scenario.yaml", "w"):
            pass
        worker.join()
    assert done, "plot waited on a FIFO"


def test_a_breakdown_interval_below_the_axis_start_ends_in_an_arrow_head():
    """CPR's 0.18% ± 0.2% on a log axis from 0.1: its whisker was cut at the axis' start and
    read as ending there. It ends in an arrow head there now; one inside the axis does not."""
    import matplotlib.pyplot as plt

    from ftsim.plots.breakdown import _totals
    from ftsim.plots.style import PolicyStyle

    class Data:
        styles = {p: PolicyStyle("#0072B2", "^", p) for p in ("cut", "whole")}

    t = pd.DataFrame(
        {"policy": ["cut", "whole"], "overhead_pct": [0.18, 2.0]}
        | {"ci95_low_pct": [-0.02, 1.5], "ci95_high_pct": [0.38, 2.5]}
    )
    fig, ax = plt.subplots()
    ax.set_xscale("log")
    ax.set_xlim(0.1, 10)
    _totals(Data(), ax, t, parts=False)
    heads = [line for line in ax.get_lines() if line.get_marker() == "<"]
    assert [(h.get_xdata()[0], h.get_ydata()[0]) for h in heads] == [(0.1, 0)]
    plt.close(fig)
