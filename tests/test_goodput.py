"""Goodput vocabulary: the ``ettr`` column (effective training time ratio = ideal / wall) and
Kokolis et al.'s expected-ETTR model used by ``validate``."""

import math

import pytest

from ftsim.experiments import runner
from ftsim.sim.engine import simulate
from ftsim.sim.presets import DAY_S
from ftsim.validation import kokolis
from tests.conftest import scenario


def test_ettr_is_ideal_over_wall_and_one_over_one_plus_overhead():
    s = scenario("smoke")
    rows = [simulate(s, i, rep).row() for i in range(len(s.policies)) for rep in range(3)]
    for row in rows:
        assert row["completed"]
        assert row["ettr"] == pytest.approx(row["ideal_h"] / row["wall_h"], rel=1e-12)
        assert row["ettr"] == pytest.approx(1 / (1 + row["overhead_frac"]), rel=1e-12)
        assert 0 < row["ettr"] <= 1


def test_a_failure_free_run_has_ettr_below_one_by_its_checkpoints_only():
    s = scenario("smoke", "failures=[]", "policies=[{kind: full, interval: 20 min}]")
    row = simulate(s, 0, 0).row()
    assert row["ettr"] == pytest.approx(row["ideal_h"] / (row["ideal_h"] + row["save_h"]))


def test_an_unfinished_run_reports_its_useful_progress_over_wall():
    """Cut off at max_wall_factor × ideal, a replication's ETTR is the progress it kept over
    the wall time, not ideal / wall (it did not deliver ideal)."""
    s = scenario("smoke", "failures.0.job_mtbf=6 min", "run.max_wall_factor=2")
    sim = simulate(s, 0, 0)
    row = sim.row()
    assert not row["completed"]
    assert row["ettr"] == pytest.approx(sim.progress_s / sim.wall_s)
    assert row["ettr"] < row["ideal_h"] / row["wall_h"]


def test_the_run_summary_has_the_mean_ettr_with_its_interval():
    s = scenario("smoke")
    rows = [simulate(s, 0, rep).row() for rep in range(4)]
    [summary] = runner.summarize(rows)
    values = [r["ettr"] for r in rows]
    assert summary["ettr_mean"] == pytest.approx(sum(values) / 4)
    assert summary["ettr_ci95"] > 0


def test_kokolis_model_by_hand_at_16384_gpus():
    """2,048 nodes × 6.50 per 1000 node-days, u_0 = 10 min, Δt_cp = 15 min:
    ε = 2048 × 0.0065 / 86400 s × (600 + 450) s = 0.16178, E[ETTR] = 0.83822."""
    args = (2048, 6.50e-3, 900.0, 600.0)
    assert kokolis.first_order_loss(*args) == pytest.approx(2048 * 0.0065 * 1050 / DAY_S)
    assert kokolis.expected_ettr(*args) == pytest.approx(0.83822, abs=1e-5)


@pytest.mark.parametrize("nodes", [16, 128, 512, 2048, 8192])
def test_the_first_order_model_is_within_its_neglected_terms_of_the_exact_result(nodes):
    """The oracle's tolerance ε² bounds the model's own error against the exact renewal
    result (Daly, δ = 0) over the sizes checked and beyond."""
    args = (nodes, 6.50e-3, 900.0, 600.0)
    gap = abs(kokolis.daly_ettr(*args) - kokolis.expected_ettr(*args))
    assert gap <= kokolis.first_order_loss(*args) ** 2
    assert math.isclose(kokolis.daly_ettr(1, 1e-9, 900.0, 600.0), 1.0, abs_tol=1e-9)
