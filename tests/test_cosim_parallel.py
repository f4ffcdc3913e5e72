"""Trained replications in parallel: ``run --jobs`` and sweep tasks that share a baseline."""

import csv
import itertools
import os
import subprocess
import sys
from concurrent.futures import Future

from ftsim.cli import main
from ftsim.experiments.runner import simulate_reps, training_cost
from ftsim.experiments.store import RunStore, TaskKey
from ftsim.experiments.sweep import (
    _groups,
    _planned_tasks,
    _repeated,
    _submit,
    finish,
    plan_sweep,
    run_sweep,
)
from tests.conftest import SCENARIOS
from tests.test_cosim import SMALL_TRAINER

PROD50H = SCENARIOS / "prod50h.yaml"
TRAINED = SMALL_TRAINER.replace("replications: 1", "replications: 3")
"""prod50h's six policies with a small trainer on the first 3 replications."""
TWO_TRAINED = SMALL_TRAINER.replace("replications: 1", "replications: 2")
TARGET_PLS = ("policies.1.target_pls", "policies.1.target_pls_si")
"""The swept key's columns in a sweep's rows."""


def _run(out, jobs):
    subprocess.run(
        [sys.executable, "-m", "ftsim", "run", str(PROD50H), "-q", "-o", str(out),
         "--reps", "5", "--set", TRAINED, "--jobs", str(jobs)],
        check=True, env={**os.environ, "PYTHONHASHSEED": str(jobs)},
    )  # fmt: skip
    return {name: (out / name).read_bytes() for name in ("runs.csv", "timeline.csv")}


def test_run_gives_the_same_files_with_one_or_two_jobs(tmp_path):
    serial, parallel = _run(tmp_path / "serial", 1), _run(tmp_path / "parallel", 2)
    assert serial == parallel
    rows = list(csv.DictReader(serial["runs.csv"].decode().splitlines()))
    assert len(rows) == 6 * 5
    assert sum(r["logloss_delta"] != "" for r in rows) == 6 * 3


def _plan():
    """Two points, three replications of which the first two train the model."""
    return plan_sweep(
        PROD50H,
        ["run.replications=3", TWO_TRAINED],
        ["policies.1.target_pls=0.05,0.1"],
        None,
    )


def _sweep(tmp_path, name, **options):
    plan = _plan()
    store = RunStore.create(tmp_path / name, {"config_hash": plan.config_hash})
    run_sweep(plan, store, **options)
    finish(plan, store)
    return list(csv.DictReader((tmp_path / name / "runs.csv").open()))


def test_a_sweep_trains_one_baseline_per_replication_for_all_policies_of_points_alike():
    """Points that differ only in their policies share the failure-free model too."""
    plan = _plan()
    tasks = [TaskKey(p, q, 0, 1) for p in (0, 1) for q in range(6)]
    tasks += [TaskKey(0, q, 1, 3) for q in range(6)]  # replication 1 trains, 2 does not
    groups = _groups(plan, tasks)
    assert groups == [tasks[:12], tasks[12:]]
    timing_only = [TaskKey(1, q, 2, 3) for q in range(6)]
    assert _groups(plan, timing_only) == [[k] for k in timing_only]
    # with workers to spare (3 for 2 trained replications), per point: none waits
    assert _groups(plan, tasks, workers=2) == groups
    spread = _groups(plan, tasks, workers=3)
    assert [[(k.point, k.start) for k in g] for g in spread] == [
        [(0, 0)] * 6,
        [(1, 0)] * 6,
        [(0, 1)] * 6,
    ]
    other = plan_sweep(PROD50H, ["run.replications=3", TWO_TRAINED], ["run.seed=1,2"], None)
    assert [[k.point for k in g] for g in _groups(other, tasks[:12])] == [[0] * 6, [1] * 6]


def test_points_with_other_failures_train_one_failure_free_model_and_give_their_runs_rows(
    tmp_path,
):
    """The failure-free model depends on the trainer section, the seed and the shards only:
    points that differ in their failures share it, each policy forking at its own point's
    failures; every point's rows, trained columns too, are those of a run at that point."""
    plan = plan_sweep(PROD50H, ["run.replications=2", TWO_TRAINED], ["failures.0.count=3,6"], None)
    tasks = _planned_tasks(plan, 10)
    assert [[(k.point, k.policy) for k in g] for g in _groups(plan, tasks)] == [
        [(p, q) for p in (0, 1) for q in range(6)]
    ] * 2
    store = RunStore.create(tmp_path / "sweep", {"config_hash": plan.config_hash})
    run_sweep(plan, store, jobs=1)
    finish(plan, store)
    rows = list(csv.DictReader((tmp_path / "sweep" / "runs.csv").open()))
    for point, count in enumerate((3, 6)):
        out = tmp_path / f"run{point}"
        argv = ["run", str(PROD50H), "-q", "-o", str(out), "--reps", "2", "--jobs", "1"]
        assert main([*argv, "--set", TWO_TRAINED, "--set", f"failures.0.count={count}"]) == 0
        run = list(csv.DictReader((out / "runs.csv").open()))
        assert [{k: v for k, v in r.items() if not k.startswith(("point", "failures"))}
                for r in rows if r["point"] == str(point)] == run  # fmt: skip


class _Recorder:
    """An executor that records the tasks submitted to it and runs none."""

    def __init__(self):
        self.groups = []

    def submit(self, fn, tasks):
        self.groups.append([shards[0][0] for _, shards in tasks])  # the keys run
        return Future()


def test_a_pool_gets_the_trained_tasks_first_costliest_first_then_the_rest_in_plan_order():
    """A trained replication takes seconds where a timing batch takes milliseconds: one
    submitted last would keep a worker busy long after the other ran out of tasks."""
    plan = _plan()
    pool = _Recorder()
    _submit(plan, *_repeated(plan, _planned_tasks(plan, 10)), pool)
    order = [(g[0].point, g[0].start, len(g)) for g in pool.groups]
    # all policies together, with point 1's policy 1 (its others repeat point 0's)
    trained = [(0, rep, 7) for rep in (0, 1)]
    cost = {(0, rep): training_cost(plan.points[0].scenario, rep, 7) for rep in (0, 1)}
    assert cost[0, 0] != cost[0, 1]  # the order is decided by the cost, not the plan
    trained.sort(key=lambda task: -cost[task[:2]])
    timing = [(0, 2, 1)] * 6 + [(1, 2, 1)]  # a task per policy
    assert order == trained + timing


TINY_TRAINER = (
    "trainer={steps: 40, batch_size: 16, replications: 6, eval_samples: 64,"
    " model: {embedding_dim: 4, bottom_mlp: [8, 4], top_mlp: [8, 1]},"
    " data: {kind: synthetic, row_cap: 50}}"
)


def costliest_first(cost) -> bool:
    """Whether prod50h's replications 0-5, trained (a tiny model), ordered by ``cost``
    train no more steps each than the one before (policies' own steps after their forks
    plus the failure-free trainer's)."""
    plan = plan_sweep(PROD50H, ["run.replications=6", TINY_TRAINER], (), None)
    scenario = plan.points[0].scenario
    rows, _ = simulate_reps(scenario, list(plan.policies), range(6))
    steps = [sum(mine[rep]["trainer_own_steps"] for mine in rows) for rep in range(6)]
    ranked = sorted(range(6), key=lambda rep: -cost(scenario, rep, len(rows)))
    return all(steps[a] >= steps[b] for a, b in itertools.pairwise(ranked))


def test_training_cost_ranks_replications_by_the_steps_they_train():
    assert costliest_first(training_cost)


def test_cost_check_catches_a_cost_that_falls_with_an_early_failure():
    def backwards(scenario, rep, policies):
        return -training_cost(scenario, rep, policies)

    assert not costliest_first(backwards)


def test_sweep_rows_do_not_depend_on_batching_or_workers_and_are_those_of_run(tmp_path):
    serial = _sweep(tmp_path, "serial", jobs=1, batch=3)
    assert serial == _sweep(tmp_path, "pool", jobs=2, batch=2)
    assert sum(r["logloss_delta"] != "" for r in serial) == 2 * 6 * 2
    # point 1's policies other than 1 repeat point 0's (their rows, trained too, copied), and
    # its policy 1 trained next to point 0's on one failure-free model: rows as a run's
    for point, target in enumerate(("0.05", "0.1")):
        out = tmp_path / f"run{point}"
        subprocess.run(
            [sys.executable, "-m", "ftsim", "run", str(PROD50H), "-q", "-o", str(out),
             "--reps", "3", "--set", TWO_TRAINED, "--set", f"policies.1.target_pls={target}",
             "--jobs", "1"],
            check=True,
        )  # fmt: skip
        run = list(csv.DictReader((out / "runs.csv").open()))
        mine = [r for r in serial if r["point"] == str(point)]
        assert [{k: v for k, v in r.items() if k not in ("point", *TARGET_PLS)}
                for r in mine] == run  # fmt: skip


def test_run_refuses_fewer_than_one_job(capsys):
    assert main(["run", str(SCENARIOS / "smoke.yaml"), "--jobs", "0", "-q"]) == 2
    assert "--jobs must be at least 1" in capsys.readouterr().err
