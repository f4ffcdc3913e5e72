"""CPR's time model: partial reload, no rollback, PLS accounting, interval choice, fallback."""

import pytest

from ftsim.experiments.runner import simulate
from ftsim.policies.inputs import PlanInputs
from ftsim.sim.popularity import distinct_rows, sampled_buffer
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


def test_mfu_pays_for_counters_their_updates_and_the_selection():
    s = scenario("prod50h")
    sim = simulate(s, MFU, 0)
    row, job = sim.row(), s.job
    shard_rows = 26 * 33e6 / 18
    # A 4-byte counter per row: 191 MB per embedding PS, 0.78% of its 24.6 GB of state.
    assert row["tracker_bytes_per_shard"] == pytest.approx(4 * shard_rows)
    assert row["tracker_mem_frac"] == pytest.approx(4 * shard_rows / sim.layout.shard_bytes)
    # One 10-ns increment per touched row and iteration, over 20 PS cores: U/E rows per
    # 100 ms, with U the expected distinct rows among 20480 Zipf(1.05) lookups of each of
    # the 26 tables.
    touched = distinct_rows(PlanInputs.of(s).row_popularity(1.05), 20480) / 18
    assert 0.4 * 20480 * 26 / 18 < touched < 0.6 * 20480 * 26 / 18
    assert row["tracking_slowdown_frac"] == pytest.approx(touched * 10e-9 / 20 / 0.1)
    assert row["other_h"] == pytest.approx(job.training / 3600 * touched * 10e-9 / 20 / 0.1)
    # A partial save scans every counter of the shard (10 ns each), then writes 5% of it.
    write_s = sim.layout.write_s([0.05 * sim.layout.shard_bytes] * 18)
    assert row["partial_save_s"] == pytest.approx(shard_rows * 10e-9 + write_s)
    saves = (
        row["n_checkpoints"] * sim.policy.plan.save_s
        + row["n_partial_saves"] * (row["partial_save_s"])
    )
    assert row["save_h"] * 3600 == pytest.approx(saves)


def test_ssu_pays_for_sampling_and_its_buffer_and_saves_what_it_sampled():
    s = scenario("prod50h")
    sim = simulate(s, SSU, 0)
    row = sim.row()
    shard_rows = 26 * 33e6 / 18
    buffer = 0.05 * shard_rows  # default: fraction × rows of a shard
    assert row["tracker_bytes_per_shard"] == pytest.approx(8 * buffer)  # 8-byte row ids
    touched = distinct_rows(PlanInputs.of(s).row_popularity(1.05), 20480) / 18
    assert row["tracking_slowdown_frac"] == pytest.approx(touched * 5e-9 / 20 / 0.1)
    # The buffer holds the ids sampled in its last W iterations: repeats of hot rows leave
    # far fewer distinct rows than its capacity, and those are what a partial save writes.
    held = sampled_buffer(
        PlanInputs.of(s).row_popularity(1.05), 0.01, 20480, 18 * buffer, 2 * 36000
    )
    assert held.entries == pytest.approx(18 * buffer)
    assert held.window < 2 * 36000
    assert row["partial_rows_per_shard"] == pytest.approx(held.rows / 18)
    assert row["partial_rows_per_shard"] < 0.5 * buffer
    write_s = sim.layout.write_s([held.rows / 18 * s.job.mean_row_bytes] * 18)
    assert row["partial_save_s"] == pytest.approx(held.entries / 18 * 10e-9 + write_s)
    assert row["saved_share_model"] == pytest.approx(held.share)


def test_mfu_and_ssu_keep_different_shares_and_cost_different_times():
    s = scenario("prod50h")
    mfu, ssu, cpr = (simulate(s, i, 0).row() for i in (MFU, SSU, CPR))
    # MFU's top 5% of rows carry more of the updates than SSU's sample of the last minutes.
    assert 0.7 < ssu["saved_share_model"] < mfu["saved_share_model"] < 0.95
    assert cpr["pls_predicted"] > ssu["pls_predicted"] > mfu["pls_predicted"]
    # SSU writes fewer rows, samples more cheaply than MFU counts, and keeps 10× less memory.
    assert ssu["partial_save_s"] < mfu["partial_save_s"]
    assert ssu["tracking_slowdown_frac"] < mfu["tracking_slowdown_frac"]
    assert ssu["tracker_mem_frac"] == pytest.approx(mfu["tracker_mem_frac"] / 10)
    assert cpr["overhead_frac"] < ssu["overhead_frac"] < mfu["overhead_frac"]


def test_tracking_costs_stop_when_cpr_falls_back_to_full_recovery():
    s = scenario("prod50h", "policies.2.target_pls=0.0001")
    row = simulate(s, MFU, 0).row()
    assert row["cpr_decision"] == "full"
    assert row["other_h"] == 0 and row["n_partial_saves"] == 0


def test_a_rollback_discards_the_partial_saves_after_the_full_checkpoint():
    """A trainer failure at 5 h rolls CPR-MFU back to its last full checkpoint (0 h); an
    embedding PS failure at 6 h then lost the updates of 1 h, as CPR's. The partial save
    of 4 h, of state the rollback discarded, was still counted: pls_model came out
    negative (-0.0029), and below zero a --max-pls limit or a target never binds."""
    failures = "failures=[{kind: scheduled, times: [5 h, 6 h], nodes: [[trainer0], [emb_ps0]]}]"
    cpr = ("target_pls=null", "interval=9 h", "fallback=false")  # policies 1-3: CPR kinds
    settings = [f"policies.{i}.{setting}" for i in (1, 2, 3) for setting in cpr]
    s = scenario("prod50h", failures, *settings)
    pls = {i: simulate(s, i, 0).row()["pls_model"] for i in (1, 2, 3)}  # cpr, mfu, ssu
    assert pls[1] > 0 and pls[2] == pytest.approx(pls[1], rel=1e-3) == pls[3]  # tracking: slower
    random = scenario(
        "prod50h", "failures=[{kind: exponential, role: any, job_mtbf: 3 h}]", *settings
    )
    for rep in range(10):
        for i in (2, 3):
            assert simulate(random, i, rep).row()["pls_model"] >= 0


def test_partial_recovery_predicts_the_rollbacks_of_trainer_failures():
    """With trainer_failure: full a failure that takes a trainer rolls every node back to
    the last full checkpoint: q (T_save/2 + L_all - L_m) / T_fail more, q the share of
    failures that take a trainer (20 of 38 nodes here). A new user's CPR at 38 h, planned
    without it at 0.41%, ran 842%; it now falls back to full recovery. With replica, the
    term is 0."""
    any_node = "failures=[{kind: exponential, role: any, job_mtbf: 5 h}]"
    rolls = scenario("prod50h", any_node).policies[1]
    copies = scenario("prod50h", any_node, "policies.1.trainer_failure=replica").policies[1]
    inputs = PlanInputs.of(scenario("prod50h", any_node))
    full, replica = rolls.plan(inputs), copies.plan(inputs)
    q = 20 / 38
    assert inputs.victims["trainer"] == pytest.approx(q)
    rollback = q * (replica.interval_s / 2 + replica.load_all_s - replica.load_lost_s) / 18000
    assert full.asked_interval_s == replica.interval_s  # the same target: 38 h
    assert full.predicted["partial"] == pytest.approx(replica.predicted["partial"] + rollback)
    assert not full.partial and replica.partial  # 2.01 against 0.117 for full recovery


def test_the_planned_reload_of_a_failure_of_any_node_is_its_expected_share_of_a_shard():
    """A failure of any of the 38 nodes takes an embedding PS with probability 18/38: CPR's
    plan reloads that share of a shard's reload on average (the ``load_cost_s`` column).
    Rounding 0.47 shards to 0 planned no reload at all."""
    s = scenario("prod50h", "failures=[{kind: exponential, role: any, job_mtbf: 10 h}]")
    plan = s.policies[CPR].plan(PlanInputs.of(s))
    assert plan.shards_per_failure == pytest.approx(18 / 38)
    one = plan.layout.read_s([plan.layout.shard_bytes])
    assert one > 1 and plan.load_lost_s == pytest.approx(18 / 38 * one, rel=1e-12)
    mixed = plan._reload_s(2.5)  # half the failures take 2, half 3
    two, three = (plan.layout.read_s([plan.layout.shard_bytes] * n) for n in (2, 3))
    assert mixed == pytest.approx((two + three) / 2, rel=1e-12)
    assert plan._reload_s(4.0) == plan.layout.read_s([plan.layout.shard_bytes] * 4)


def test_partial_saves_that_never_come_are_said():
    """A partial_interval not shorter than the full saves' (9 h on prod50h) makes no
    partial save (n_partial_saves 0): fraction does nothing while the rows are still
    tracked. It was silent (a new user's advice searched fraction there)."""
    from ftsim.experiments.sweep import policy_notices

    s = scenario("prod50h", "policies.2.partial_interval=9 h", "trainer.enabled=false")
    said = [str(n) for n in policy_notices(s)]
    assert said == [
        "cpr_mfu: partial_interval 9 h is not shorter than the full saves' interval, 9 h: no "
        "partial save is made, so fraction 0.05 has no effect; tracking the rows still costs "
        "(tracking_slowdown_frac)"
    ]
    assert simulate(s, MFU, 0).row()["n_partial_saves"] == 0
    assert policy_notices(scenario("prod50h", "trainer.enabled=false")) == []
