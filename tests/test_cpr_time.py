"""CPR's time model: partial reload, no rollback, PLS accounting, interval choice, fallback."""

import pytest

from ftsim.policies.cpr import zipf_top_share
from ftsim.sim.engine import simulate
from tests.conftest import scenario

CPR, MFU, SSU = 1, 2, 3  # policy indices in prod50h


def test_partial_recovery_reloads_only_failed_shards_without_rollback():
    s = scenario("prod50h")
    sim = simulate(s, CPR, 0)
    row = sim.row()
    assert row["cpr_decision"] == "partial"
    assert row["lost_h"] == pytest.approx(0, abs=1e-9)
    # Each failure reloads 4 of the 18 shards: 4 × 26.2 GB at 4 × 3.125 GB/s capped by 8 GB/s.
    shard = sim.layout.shard_bytes
    assert sim.breakdown_s()["load"] == pytest.approx(5 * (4 * shard / 8e9 + 50e-6), rel=1e-9)
    full = simulate(s, 0, 0).row()
    assert row["wall_h"] < full["wall_h"]


def test_interval_from_target_pls():
    s = scenario("prod50h")
    row = simulate(s, CPR, 0).row()
    # T_save = 2 · N_emb · T_fail · PLS / m = 2 · 18 · 10 h · 0.1 / 4 = 9 h
    assert row["interval_h"] == pytest.approx(9.0)
    assert row["pls_predicted"] == pytest.approx(0.1)


def test_interval_from_target_accuracy_loss():
    s = scenario(
        "prod50h",
        "policies.1.target_pls=null",
        "policies.1.target_accuracy_loss=0.002",
        "policies.1.pls_slope=0.04",
    )
    assert simulate(s, CPR, 0).row()["interval_h"] == pytest.approx(4.5)


def test_measured_pls_agrees_with_prediction_on_average():
    # Exponential single-shard failures on a long run: the stationary formula applies.
    s = scenario(
        "prod50h",
        "failures=[{kind: exponential, role: emb_ps, job_mtbf: 5 h}]",
        "job.training=500 h",
        "policies.1.target_pls=0.02",
    )
    rows = [simulate(s, CPR, rep).row() for rep in range(40)]
    measured = sum(r["pls_model"] for r in rows) / len(rows)
    assert measured == pytest.approx(rows[0]["pls_predicted"], rel=0.10)


def test_prioritized_saves_lower_pls_and_cost_partial_writes():
    s = scenario("prod50h")
    cpr = [simulate(s, CPR, rep).row() for rep in range(10)]
    mfu = [simulate(s, MFU, rep).row() for rep in range(10)]
    assert sum(r["pls_model"] for r in mfu) < 0.5 * sum(r["pls_model"] for r in cpr)
    assert all(m["save_h"] > c["save_h"] for m, c in zip(mfu, cpr, strict=True))
    assert mfu[0]["n_partial_saves"] > 0


def test_fallback_to_full_recovery_when_cheaper():
    # A tiny PLS target forces a checkpoint every ~minute: partial recovery would cost more.
    s = scenario("prod50h", "policies.1.target_pls=0.0001")
    row = simulate(s, CPR, 0).row()
    assert row["predicted_overhead_partial"] > row["predicted_overhead_full"]
    assert row["cpr_decision"] == "full"
    assert row["lost_h"] > 0 and row["pls_model"] == 0
    no_fallback = scenario("prod50h", "policies.1.target_pls=0.0001", "policies.1.fallback=false")
    assert simulate(no_fallback, CPR, 0).row()["cpr_decision"] == "partial"


def test_trainer_failure_rolls_back_or_copies_from_a_replica():
    failing_trainer = "failures=[{kind: scheduled, times: [5 h], nodes: [[trainer3]]}]"
    full = simulate(scenario("prod50h", failing_trainer), CPR, 0).row()
    assert full["lost_h"] > 0
    replica = simulate(
        scenario("prod50h", failing_trainer, "policies.1.trainer_failure=replica"), CPR, 0
    ).row()
    assert replica["lost_h"] == pytest.approx(0, abs=1e-9)
    assert replica["load_h"] * 3600 == pytest.approx(20e6 * 2 * 4 / 3.125e9 + 50e-6)


def test_zipf_top_share():
    assert zipf_top_share(1.0, 1000, 1.05) == pytest.approx(1.0)
    uniform = zipf_top_share(0.1, 10**6, 1e-9)
    assert uniform == pytest.approx(0.1, rel=1e-3)
    assert 0.5 < zipf_top_share(0.01, 10**6, 1.05) < 0.9
