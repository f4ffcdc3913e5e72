"""CPR's plan-time decision is said: a fall-back to full recovery warns once per policy and
sweep point, naming the interval asked for and the one run, and the tables show it."""

import warnings

import pandas as pd
import pytest

from ftsim.cli import main
from ftsim.experiments.sweep import plan_sweep, policy_notices
from ftsim.notices import CprFallback
from ftsim.scenario.loader import load_scenario
from tests.conftest import SCENARIOS

PROD50H = SCENARIOS / "prod50h.yaml"
CPR_ONLY = ["--policy", "full", "--policy", "cpr", "--no-trainer", "--reps", "3"]


def test_a_fall_back_is_a_notice_with_the_interval_asked_and_run():
    scenario = load_scenario(PROD50H, ["policies.*.interval=15 min"], ["full", "cpr", "ecrm"])
    [notice] = policy_notices(scenario)
    assert isinstance(notice, CprFallback) and notice.policy == "cpr"
    assert notice.asked_s == 900.0 and notice.asked == "interval 15 min"
    assert notice.predicted["full"] < notice.predicted["partial"]
    assert "asked for interval 15 min, ran full recovery every 45.8 min" in str(notice)
    # the file's own setting (target_pls 0.1 → 10 h) is cheaper partially: nothing to say
    assert policy_notices(load_scenario(PROD50H)) == []


def test_run_warns_once_per_policy_and_shows_the_decision(tmp_path, capsys):
    args = ["run", str(PROD50H), *CPR_ONLY, "--set", "policies.*.interval=15 min"]
    with warnings.catch_warnings():
        assert main([*args, "-o", str(tmp_path / "r")]) == 0
    out, err = capsys.readouterr()
    warned = [line for line in err.splitlines() if line.startswith("ftsim: warning:")]
    assert len(warned) == 1 and warned[0].startswith(
        "ftsim: warning: cpr: asked for interval 15 min, ran full recovery every 45.8 min"
    )
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["policy", "cpr_decision"]
    assert lines[2].split()[:4] == ["cpr", "full", "@", "45.8"]
    runs = pd.read_csv(tmp_path / "r" / "runs.csv")
    cpr = runs[runs["policy"] == "cpr"]
    assert set(cpr["cpr_decision"]) == {"full"}
    assert cpr["interval_h"].round(4).unique().tolist() == [round(45.8356430298 / 60, 4)]


def test_a_sweep_says_the_interval_run_next_to_the_one_asked(tmp_path, capsys):
    grid = ["--grid", "policies.*.interval=15 min,20 min,2 h"]
    with warnings.catch_warnings():
        assert main(["sweep", str(PROD50H), *CPR_ONLY, *grid, "-o", str(tmp_path / "s")]) == 0
    out, err = capsys.readouterr()
    warned = [line for line in err.splitlines() if line.startswith("ftsim: warning:")]
    assert [w.split(":")[2].strip() for w in warned] == [
        "cpr at point 0 (policies.*.interval=15 min)",
        "cpr at point 1 (policies.*.interval=20 min)",
    ]  # once per point, not per replication; 2 h is run as asked
    table = [line.split() for line in out.splitlines()]
    assert table[0][:4] == ["policies.*.interval", "policy", "interval", "run"]
    rows = {(r[0] + " " + r[1], r[2]): r[3:] for r in table[1:7]}
    assert rows["15 min", "cpr"][:6] == ["45.8", "min", "full", "@", "45.8", "min"]
    assert rows["20 min", "cpr"][:3] == ["45.8", "min", "full"]
    assert rows["2 h", "cpr"][:5] == ["2", "h", "partial", "@", "2"]
    summary = pd.read_csv(tmp_path / "s" / "summary.csv")
    assert summary["cpr_decision"].dropna().tolist() == ["full", "full", "partial"]


@pytest.mark.parametrize("values", [["15 min", "20 min"]])
def test_every_notice_names_the_interval_the_rows_ran(values):
    """Against the rows: an injected bug that reports the asked interval as run fails."""
    from ftsim.experiments.runner import simulate_reps

    grid = [f"policies.*.interval={','.join(values)}"]
    plan = plan_sweep(PROD50H, ["run.replications=1", "trainer.enabled=false"], grid, ["cpr"])
    assert len(plan.notes) == len(values)
    for point, notice in zip(plan.points, plan.notes, strict=True):
        [[row]], _ = simulate_reps(point.scenario, [0], [0])
        assert notice.used_s == pytest.approx(3600 * row["interval_h"], rel=1e-12)
        assert notice.asked_s != notice.used_s


def test_an_interval_past_the_training_says_it_saves_nothing(tmp_path, capsys):
    """CPR planned at 51.2 h on a 50 h job read "partial @ 51.2 h", as if it saved every
    51.2 h; it saved nothing (a new user's study)."""
    from ftsim.experiments.tables import decision_cell

    assert decision_cell("partial", 51.2, 50.0) == "partial @ 51.2 h (no save in 50 h)"
    assert decision_cell("partial", 9.0, 50.0) == "partial @ 9 h"
    assert decision_cell("full", 0.5) == "full @ 30 min"
    # only trainers fail: "partial @ inf h (no save in 50 h)" (a new user's study)
    no_ps = "partial, no save (no embedding PS failure to plan for)"
    assert decision_cell("partial", float("inf"), 50.0) == no_ps
    out = tmp_path / "r"
    args = ["run", str(SCENARIOS / "prod50h.yaml"), "--policy", "cpr", "--no-trainer"]
    assert main([*args, "--set", "policies.1.target_pls=0.9", "--reps", "2", "-o", str(out)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("cpr "))
    assert "(no save in 50 h)" in line
    trainers = "failures=[{kind: exponential, role: trainer, job_mtbf: 10 h}]"
    replica = "policies.1.trainer_failure=replica"  # (full: every trainer failure rolls back)
    args += ["--set", trainers, "--set", replica, "--reps", "2", "-o", str(tmp_path / "t")]
    assert main(args) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("cpr "))
    assert no_ps in line


def test_a_fall_back_caused_by_trainer_rollbacks_says_so():
    """A new user's CPR-MFU under failures of any node fell back predicting 400% for partial
    recovery, without a word of why: its trainer failures roll every node back, and the
    notice now gives that share and the setting that avoids it."""
    any_node = ["failures=[{kind: exponential, role: any, job_mtbf: 6 h}]"]
    [notice] = policy_notices(load_scenario(PROD50H, any_node, ["cpr_mfu"]))
    rollbacks = 100 * notice.predicted["rollbacks"]
    assert rollbacks > 100 * notice.predicted["partial"] / 2
    assert f", {rollbacks:.2f}% of it trainer failures rolling every node back" in str(notice)
    assert "(trainer_failure: replica copies a failed trainer from a replica)" in str(notice)
    [plain] = policy_notices(load_scenario(PROD50H, ["policies.*.interval=15 min"], ["cpr"]))
    assert plain.predicted["rollbacks"] == 0 and "rolling" not in str(plain)
