"""How many local workers a study gets (:func:`ftsim.experiments.sweep.local_workers`): the
CPUs by default, one (the calling process) for a small timing study, at most the tasks to
run, and a requested ``--jobs`` as asked unless it exceeds those, with a note saying so."""

import pytest

from ftsim.experiments import sweep
from ftsim.experiments.sweep import SERIAL_TIMING_REPLICATIONS, local_workers, plan_sweep
from ftsim.options import command_line
from tests.conftest import SCENARIOS

SMOKE = SCENARIOS / "smoke.yaml"  # 3 policies, no trainer
POLICIES = 3


@pytest.fixture(autouse=True)
def four_cpus(monkeypatch):
    monkeypatch.setattr(sweep, "default_jobs", lambda: 4)


def _timing(reps: int, *grid: str, policies=None, **options):
    return plan_sweep(SMOKE, [f"run.replications={reps}"], list(grid), policies, **options)


def test_a_timing_study_of_at_most_the_threshold_runs_in_the_calling_process():
    plan = _timing(SERIAL_TIMING_REPLICATIONS, policies=["checkfreq"])
    assert local_workers(plan, None, 10) == (1, None)


def test_a_timing_study_above_the_threshold_gets_the_cpus():
    plan = _timing(SERIAL_TIMING_REPLICATIONS + 1, policies=["checkfreq"])
    assert local_workers(plan, None, 10) == (4, None)


def test_the_threshold_counts_every_point_and_policy():
    reps = SERIAL_TIMING_REPLICATIONS // (2 * POLICIES) + 1
    grid = "policies.*.interval=10 min,30 min"
    assert local_workers(_timing(reps), None, 10) == (1, None)
    assert local_workers(_timing(reps, grid), None, 10) == (4, None)


def test_a_small_study_uses_the_jobs_asked_for():
    assert local_workers(_timing(4), 2, 1) == (2, None)


def test_a_target_halfwidth_may_add_replications_so_the_study_is_not_small():
    plan = _timing(4, target_halfwidth=0.01)
    assert local_workers(plan, None, 1) == (4, None)


def test_a_study_that_trains_the_model_gets_the_cpus_however_small():
    plan = plan_sweep(SCENARIOS / "cpr_pls.yaml", ["run.replications=2"], [], None)
    assert plan.points[0].scenario.trains_model(0)
    assert local_workers(plan, None, 10)[0] > 1


def test_more_jobs_than_tasks_or_cpus_are_lowered_with_a_note():
    plan = _timing(4)  # 3 tasks of up to 10 replications
    assert local_workers(plan, 64, 10) == (3, "jobs=64: using 3 (the tasks to run)")
    many = _timing(40)
    assert local_workers(many, 64, 10) == (4, "jobs=64: using 4 (the CPUs available)")
    with command_line():  # as ftsim sweep --jobs 64 says it
        assert local_workers(many, 64, 10) == (4, "--jobs 64: using 4 (the CPUs available)")
    assert local_workers(many, None, 10) == (4, None)  # the default is not a request
