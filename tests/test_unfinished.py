"""Replications that hit ``run.max_wall_factor`` are unfinished, not ``inf%`` overhead.

With a failure every 6 minutes of wall time, ``full`` (20-minute interval) and
``checkfreq`` (10-minute interval) never reach a checkpoint and cannot finish; ``full_daly``
checkpoints often enough to finish.
"""

import math

import pandas as pd
import pytest

from ftsim.cli import EXIT_UNFINISHED, main
from ftsim.experiments import stats
from ftsim.experiments.tables import run_table, sweep_table
from tests.conftest import SCENARIOS

IMPOSSIBLE = [
    "--set",
    "failures.0={kind: scheduled, count: 100, spacing: even, end: 10 h, role: any}",
    "--set",
    "run.max_wall_factor=2",
]
SMOKE = str(SCENARIOS / "smoke.yaml")


@pytest.fixture(scope="module")
def unfinished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("unfinished") / "run"
    status = main(["run", SMOKE, "--reps", "2", *IMPOSSIBLE, "-o", str(out)])
    return status, out


def test_run_exits_3_and_reports_unfinished_replications(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", SMOKE, "--reps", "2", *IMPOSSIBLE, "-o", str(out)]) == EXIT_UNFINISHED == 3
    printed = capsys.readouterr()
    assert "inf" not in printed.out
    table = {line.split()[0]: line.split() for line in printed.out.splitlines()}
    assert table["policy"][-1] == "unfinished"
    assert table["full"][1] == "unfinished" and table["full"][-1] == "2"
    assert table["full_daly"][1].endswith("%") and table["full_daly"][-1] == "0"
    warnings = [line for line in printed.err.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: {p}: 2 of 2 replications did not finish within run.max_wall_factor × the "
        "failure-free time; statistics are over the 0 that finished"
        for p in ("full", "checkfreq")
    ]


def test_summary_counts_unfinished_and_keeps_them_out_of_the_statistics(unfinished_run):
    status, out = unfinished_run
    assert status == 3
    runs = pd.read_csv(out / "runs.csv")
    assert not runs.loc[runs.policy == "full", "completed"].any()
    assert runs.loc[runs.policy == "full_daly", "completed"].all()
    summary = pd.read_csv(out / "summary.csv").set_index("policy")
    assert summary.loc["full", ["n", "n_unfinished"]].tolist() == [0, 2]
    assert math.isnan(summary.loc["full", "overhead_frac_mean"])
    assert summary.loc["full_daly", ["n", "n_unfinished"]].tolist() == [2, 0]
    daly = runs[runs.policy == "full_daly"]
    mean = summary.loc["full_daly", "overhead_frac_mean"]
    assert mean == pytest.approx(daly.overhead_frac.mean())


def test_plot_leaves_out_a_policy_without_finished_replications(unfinished_run):
    from ftsim.plots import plot_run

    outcomes = dict(plot_run(unfinished_run[1]))
    assert "without full: none of its replications finished" in outcomes["breakdown"]
    assert "without checkfreq" in outcomes["breakdown"]
    breakdown = pd.read_csv(unfinished_run[1] / "plots" / "breakdown.csv")
    assert breakdown["policy"].tolist() == ["full_daly"]


def test_sweep_exits_3_with_unfinished_counted_per_point(tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["sweep", SMOKE, "--reps", "2", *IMPOSSIBLE, "--grid", "cluster.trainers=4,8"]
    assert main([*args, "--jobs", "1", "-o", str(out)]) == 3
    printed = capsys.readouterr()
    assert "warning: full at cluster.trainers=8: 2 of 2 replications" in printed.err
    summary = pd.read_csv(out / "summary.csv")
    assert summary.groupby("policy")["n_unfinished"].sum().to_dict() == {
        "full": 4,
        "full_daly": 0,
        "checkfreq": 4,
    }


def _rows(policy, overheads, completed):
    return [
        {
            "policy": policy,
            "kind": "full",
            "point": 0,
            "rep": rep,
            "overhead_frac": value if done else math.inf,
            "ettr": 1 / (1 + value) if done else 0.01,
            "completed": done,
            **{f"{c}_h": 1.0 for c in ("save", "load", "lost", "reschedule", "degraded")},
            "other_h": 0.0,
            "wall_h": 2.0,
            "n_failures": 3,
        }
        for rep, (value, done) in enumerate(zip(overheads, completed, strict=True))
    ]


def test_the_summary_averages_over_finished_replications_only():
    rows = _rows("a", [0.1, 0.3, 9.0], [True, True, False]) + _rows(
        "b", [0.2, 9.0, 0.5], [True, False, True]
    )
    frame = stats.summarize(pd.DataFrame(rows), reference="a").set_index("policy")
    assert frame.loc["a", ["n", "n_unfinished"]].tolist() == [2, 1]
    assert frame.loc["a", "overhead_frac_mean"] == pytest.approx(0.2)
    assert frame.loc["b", "overhead_frac_mean"] == pytest.approx(0.35)
    # paired over the replications both finished: only rep 0 (0.2 - 0.1)
    assert frame.loc["b", "overhead_frac_diff_n"] == 1
    assert frame.loc["b", "overhead_frac_diff_mean"] == pytest.approx(0.1)
    assert "unfinished" in sweep_table(frame.reset_index(), [])
    assert "unfinished" in run_table(frame.reset_index())


def test_from_python_unfinished_replications_are_warnings(tmp_path):
    """ftsim.run and ftsim.sweep said nothing of them (a new user's mean over the one lucky
    survivor of 10): the command line's lines, as UnfinishedReplications notices."""
    import ftsim
    from ftsim.notices import UnfinishedReplications

    overrides = {
        "failures.0": {"kind": "scheduled", "count": 100, "spacing": "even", "end": "10 h"},
        "run.max_wall_factor": 2,
    }
    with pytest.warns(UnfinishedReplications) as caught:
        ftsim.run(SMOKE, overrides, reps=2, trainer=False, out=tmp_path / "run")
    caught = [w for w in caught if w.category is UnfinishedReplications]
    assert [str(w.message) for w in caught] == [
        f"{p}: 2 of 2 replications did not finish within run.max_wall_factor × the "
        "failure-free time; statistics are over the 0 that finished"
        for p in ("full", "checkfreq")
    ]
    assert all(w.filename == __file__ for w in caught)  # the caller's line


def test_an_unfinished_row_cut_in_compute_adds_up():
    """100 failures in 10 h of training, cut at 2 × the failure-free time while computing:
    the compute under way is charged up to the cut (a mutant that left it out gave 7.92 h
    of an 8 h wall; the mutation audit)."""
    from ftsim.experiments.runner import simulate
    from ftsim.sim.accounting import CATEGORIES
    from tests.conftest import scenario

    failures = "failures.0={kind: scheduled, count: 100, spacing: even, end: 10 h, role: any}"
    s = scenario(
        "smoke", failures, "run.max_wall_factor=2", "policies=[{kind: full, interval: 20 min}]"
    )
    row = simulate(s, 0, 0).row()
    assert not row["completed"] and row["wall_h"] == pytest.approx(8.0)
    progress = row["ettr"] * row["wall_h"]
    assert progress + sum(row[f"{c}_h"] for c in CATEGORIES) == pytest.approx(8.0, rel=1e-12)
