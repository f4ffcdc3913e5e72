"""A policy the same at several sweep points is simulated once (issue 26, sweeps): where the
grid changes only other policies' fields, its rows at the later points are those of the
first, written with each point's columns, and equal to what a run at that point gives."""

import csv
import json

import pytest

from ftsim.cli import main
from ftsim.experiments import sweep
from ftsim.experiments.store import RunStore, TaskKey
from ftsim.experiments.sweep import Plan, _repeated, finish, plan_sweep, run_sweep
from tests.conftest import SCENARIOS

PROD50H = SCENARIOS / "prod50h.yaml"
CPR_TARGETS = ["policies.1.target_pls=0.05,0.2,0.4"]
"""Only CPR (policy 1) changes: the other five policies are the same at every point."""


def _plan(grid, *overrides):
    return plan_sweep(PROD50H, ["run.replications=3", *overrides], grid, None)


def test_only_the_policies_a_point_changes_are_new_there():
    plan = _plan(CPR_TARGETS)
    others = [0, 2, 3, 4, 5]
    assert plan.repeats == {(p, q): 0 for p in (1, 2) for q in others}


def test_a_key_outside_the_policies_changes_every_policy():
    assert _plan(["cluster.trainers=20,24"]).repeats == {}
    assert _plan(["run.seed=1,2"]).repeats == {}


def test_a_wildcard_changes_only_the_policies_that_have_the_field():
    plan = _plan(["policies.*.fraction=0.1,0.2"])  # CPR-MFU and CPR-SSU have it
    assert plan.repeats == {(1, q): 0 for q in (0, 1, 4, 5)}


def test_values_are_compared_as_validated():
    plan = _plan(["policies.0.interval=1 h,60 min,2 h"])  # 60 min is 1 h
    assert plan.repeats[1, 0] == 0
    assert (2, 0) not in plan.repeats


def test_a_repeat_runs_itself_when_its_first_point_is_not_to_run():
    """A resumed sweep may hold the first point's shard and not the repeat's."""
    plan = _plan(CPR_TARGETS)
    first, repeat = TaskKey(0, 2, 0, 3), TaskKey(1, 2, 0, 3)
    assert _repeated(plan, [first, repeat]) == ([first], {first: [repeat]})
    assert _repeated(plan, [repeat, first]) == ([first], {first: [repeat]})  # any order
    assert _repeated(plan, [repeat]) == ([repeat], {repeat: []})


def _sweep_rows(tmp_path, name, plan) -> list[dict]:
    store = RunStore.create(tmp_path / name, {"config_hash": plan.config_hash})
    run_sweep(plan, store, jobs=1)
    finish(plan, store)
    return list(csv.DictReader((tmp_path / name / "runs.csv").open()))


def _run_rows(tmp_path, name, setting) -> list[dict]:
    plan = plan_sweep(PROD50H, ["run.replications=3", setting], (), None, command="run")
    store = RunStore.create(tmp_path / name, {"config_hash": plan.config_hash})
    run_sweep(plan, store, jobs=1)
    finish(plan, store)
    return list(csv.DictReader((tmp_path / name / "runs.csv").open()))


def _rows_are_those_of_runs(tmp_path, rows) -> bool:
    """Whether each point's rows, without the point columns, are those of a run at it."""
    for point, target in enumerate((0.05, 0.2, 0.4)):
        run = _run_rows(tmp_path, f"run{point}", f"policies.1.target_pls={target}")
        mine = [
            {k: v for k, v in r.items() if not k.startswith(("point", "policies.1."))}
            for r in rows
            if r["point"] == str(point)
        ]
        if mine != run:
            return False
    return True


@pytest.fixture
def simulated(monkeypatch):
    """(policy indices, replications) of every simulation call of the sweep module."""
    calls = []
    real = sweep.simulate_policies

    def recorded(policies, reps, timeline_rep=None):
        calls.append(([q for _, q in policies], list(reps)))
        return real(policies, reps, timeline_rep)

    monkeypatch.setattr(sweep, "simulate_policies", recorded)
    return calls


def test_a_repeated_policy_is_simulated_once_and_each_point_has_its_run_rows(tmp_path, simulated):
    rows = _sweep_rows(tmp_path, "sweep", _plan(CPR_TARGETS))
    simulated_pairs = [(q, rep) for policies, reps in simulated for q in policies for rep in reps]
    assert len(simulated_pairs) == (6 + 1 + 1) * 3  # was 3 × 6 × 3
    assert len(rows) == 3 * 6 * 3
    assert _rows_are_those_of_runs(tmp_path, rows)


def test_the_check_fails_when_a_changed_policy_is_taken_for_a_repeat(tmp_path, monkeypatch):
    """Teeth: CPR at points 1 and 2 wrongly copied from point 0."""
    wrong = {(p, q): 0 for p in (1, 2) for q in range(6)}
    monkeypatch.setattr(Plan, "repeats", property(lambda self: wrong))
    rows = _sweep_rows(tmp_path, "sweep", _plan(CPR_TARGETS))
    assert not _rows_are_those_of_runs(tmp_path, rows)


def test_the_closing_line_and_the_manifest_say_how_many_replications_were_copied(tmp_path, capsys):
    out = tmp_path / "sweep"
    grid = ["--grid", "policies.1.target_pls=0.05,0.2"]
    assert main(["sweep", str(PROD50H), "--no-trainer", "--reps", "3", *grid, "-q", "-o", str(out),
                 "--jobs", "1"]) == 0  # fmt: skip
    copied = 5 * 3  # the five policies other than CPR at point 1
    line = "(15 of them copied: the policy is the same as at an earlier point)"
    assert f"computed 36 {line}, reused 0 (replications)" in capsys.readouterr().out
    sessions = json.loads((out / "manifest.json").read_text())["sessions"]
    assert [s["copied_reps"] for s in sessions] == [copied]


def test_a_notice_of_a_policy_the_same_at_every_point_is_said_once():
    """SWIFT's log-bandwidth warning came once per point, the same words each time."""
    slow = "cluster.storage.write_bandwidth=0.5 GB/s"
    notes = [str(n) for n in _plan(["policies.1.target_pls=0.05,0.1"], slow).notes]
    assert len(notes) == 1 and notes[0].startswith("every point: swift: its update log writes")
    notes = [str(n) for n in _plan(["policies.5.log_budget=1,0.5"], slow).notes]
    assert [n.split(": swift")[0] for n in notes] == ["point 0 (policies.5.log_budget=1)"]
