"""Check-N-Run under CPR's partial recovery: failed shards reload their chain, no rollback."""

import numpy as np
import pytest

from ftsim.cosim.replay import cosimulate, run_models, trainer_config
from ftsim.policies.checknrun import (
    DiffCheckpoint,
    RestoreChain,
    RestoreChainShards,
)
from ftsim.scenario.loader import ScenarioError
from ftsim.sim.engine import simulate
from ftsim.trainer import Trainer
from tests.conftest import scenario
from tests.test_checknrun import BITMAP_B, ROW_B, D, E, N, _touched, checknrun_side

WORK_S = 120.0  # job.training=2 min
NIC_BPS = 10e9 / 8
"""smoke's NIC, below its 2 GB/s storage read bandwidth: a lone PS's read rate (smoke has
no network latency)."""


def _partial(*failure_times, nodes="emb_ps2", **fields):
    """smoke for 2 min, checkpoints every 10 s (a baseline every 8), ``nodes`` failing at
    each of ``failure_times`` (wall seconds), replaced 1 s later."""
    body = "".join(f", {k}: {v}" for k, v in {"recovery": "partial", **fields}.items())
    times = ", ".join(f"{t} s" for t in failure_times)
    failed = [[nodes]] * len(failure_times)
    return scenario(
        "smoke",
        "job.training=2 min",
        f"failures=[{{kind: scheduled, times: [{times}], nodes: {failed}}}]",
        "cluster.reschedule={kind: constant, mean: 1 s}",
        f"policies=[{{kind: checknrun, interval: 10 s, popularity_exponent: 0, baseline_every: 8"
        f"{body}}}]",
    )


def _restores(sim):
    return [e for e in sim.model_events if isinstance(e, RestoreChainShards)]


# -- the time model ----------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["one_shot", "consecutive"])
def test_a_shard_failure_reloads_only_its_chain_and_rolls_nothing_back(variant):
    # checkpoints at 10 (baseline), 20, 30, 40 s of progress; PS 2 fails at 45 s of wall time
    sim = simulate(_partial(45, differential=variant), 0, 0)
    [restore] = _restores(sim)
    assert restore.shards == (2,) and restore.key == 40.0
    assert not any(isinstance(e, RestoreChain) for e in sim.model_events)
    t = restore.progress_s  # progress at the failure: 45 s less the save stalls
    assert 40 < t < 45
    breakdown = sim.breakdown_s()
    assert breakdown["lost"] == 0 and breakdown["reschedule"] == pytest.approx(1.0)
    # PS 2 alone reads its chain at its NIC's rate; the others read nothing
    diffs = [3 * D] if variant == "one_shot" else [D, D, D]  # lookups behind each
    chain_b = N * ROW_B + sum(_touched(d) * ROW_B + BITMAP_B for d in diffs)
    assert breakdown["load"] == pytest.approx(chain_b / NIC_BPS, rel=1e-9)
    row = sim.row()
    assert row["restore_gb"] * 1e9 == pytest.approx(chain_b, rel=1e-9)
    # PS 2 lost its updates since the checkpoint of 40 s: one shard of E, t − 40 s of 120 s
    assert row["pls_model"] == pytest.approx((t - 40) / (WORK_S * E), rel=1e-12)
    # the next checkpoint (50 s): PS 2's rows changed since the reference are those its
    # chain holds (one-shot: changed in 30 s; consecutive: none) and those changed since t
    since = 50 - t + (30 if variant == "one_shot" else 0)
    others = 40 if variant == "one_shot" else 10
    after = sim.policy.saves[4]
    assert after.key == 50.0 and not after.baseline
    expected = [_touched(D * others / 10) * ROW_B + BITMAP_B] * E
    expected[2] = _touched(D * since / 10) * ROW_B + BITMAP_B
    assert after.shard_bytes == pytest.approx(expected, rel=1e-9)


def test_a_shard_that_fails_twice_loses_each_update_once():
    # PS 2 fails at 43 s, is back at about 44.3 s, trains, and fails again at 47 s: both
    # between the checkpoints of 40 and 50 s of progress
    sim = simulate(_partial(43, 47), 0, 0)
    first, second = _restores(sim)
    assert first.key == second.key == 40.0 and 40 < first.progress_s < second.progress_s < 50
    assert sim.row()["pls_model"] == pytest.approx((second.progress_s - 40) / (WORK_S * E))
    # after the second restore PS 2 again holds the rows of the chain (changed in 30 s)
    since = 50 - second.progress_s + 30
    assert sim.policy.saves[4].shard_bytes[2] == pytest.approx(
        _touched(D * since / 10) * ROW_B + BITMAP_B, rel=1e-9
    )


def test_quantized_chains_dequantize_only_on_the_failed_shards():
    sim = simulate(_partial(45, quantize_bits=8), 0, 0)
    # 8 bits with a range per row: 64 + 8 = 72 B a row; 256 B of fp32 values dequantized
    rows = N + _touched(3 * D)
    read_s = (rows * 72 + BITMAP_B) / NIC_BPS
    assert sim.breakdown_s()["load"] == pytest.approx(read_s + rows * 256 / 4e9, rel=1e-9)


def test_a_trainer_failure_copies_the_dense_state_from_a_replica():
    sim = simulate(_partial(45, nodes="trainer1"), 0, 0)
    assert not _restores(sim) and sim.breakdown_s()["lost"] == 0
    dense_b = 1_000_000 * 4 * 2  # smoke: 1 M fp32 parameters and one optimizer slot
    assert sim.breakdown_s()["load"] == pytest.approx(dense_b / NIC_BPS)
    assert sim.row()["pls_model"] == 0


def test_full_recovery_is_unchanged_and_loses_no_updates():
    s = _partial(45, recovery="full")
    sim = simulate(s, 0, 0)
    assert not _restores(sim) and sim.breakdown_s()["lost"] > 0
    assert sim.row()["pls_model"] == 0 and sim.row()["pls_predicted"] == 0


def test_target_pls_chooses_the_interval_as_cpr_does():
    s = scenario(
        "checknrun", "trainer=null", "policies.6.interval=null", "policies.6.target_pls=0.05"
    )
    row = simulate(s, 6, 0).row()
    # T = 2 · E · T_fail · PLS / m = 2 · 18 · 10 h · 0.05 / 4 = 4.5 h
    assert row["interval_h"] == pytest.approx(4.5)
    assert row["pls_predicted"] == pytest.approx(0.05)
    only = "policies=[{kind: checknrun, recovery: partial, target_pls: 0.05}]"
    alone = scenario("checknrun", "trainer=null", only)
    assert alone.policies[0].interval is None


def test_interval_rules_are_located_errors():
    both = "policies.6={kind: checknrun, recovery: partial, interval: 1 h, target_pls: 0.05}"
    with pytest.raises(ScenarioError, match=r"policies\.6: .*not both"):
        scenario("checknrun", both)
    # an override of one of the two replaces the one the file gave
    chosen = scenario("checknrun", "policies.6.target_pls=0.05").policies[6]
    assert (chosen.interval, chosen.target_pls) == (None, 0.05)
    with pytest.raises(ScenarioError, match=r"policies\.5: .*target_pls needs recovery: partial"):
        scenario("checknrun", "policies.5.interval=null", "policies.5.target_pls=0.05")
    with pytest.raises(ScenarioError, match=r"policies\.6: .*give interval or target_pls"):
        scenario("checknrun", "policies.6.interval=null")
    with pytest.raises(ScenarioError, match=r"policies\.6\.recovery"):
        scenario("checknrun", "policies.6.recovery=rollback")


def test_a_composed_policy_may_use_it_for_whole_shards_under_partial_recovery():
    s = scenario("checknrun")
    full, partial = s.policies[5], s.policies[6]
    for dense in (False, True):
        [(field, message)] = full.part_problems(dense, by_rows=False)
        assert field == "recovery" and "needs recovery: partial" in message
        assert "rolls every node back" in message
        assert partial.part_problems(dense, by_rows=False) == []
        [(field, message)] = partial.part_problems(dense, by_rows=True)
        assert field == "kind" and "whole shards" in message and "popularity" in message


# -- the trainer side ----------------------------------------------------------------------


def _side(bits, differential):
    return checknrun_side(6, bits, differential)


def _rows_of(trainer, rows):
    emb = trainer.embeddings
    return emb.weights[rows].copy(), emb.state["accum"][rows].copy()


@pytest.mark.parametrize("differential", ["one_shot", "consecutive"])
@pytest.mark.parametrize("bits", ["null", 8])
def test_a_shard_restore_rebuilds_its_rows_from_the_chain_and_nothing_else(bits, differential):
    trainer, side = _side(bits, differential)
    trainer.train(3)
    side.save(trainer, 1.0, baseline=True)
    trainer.train(3)
    side.save(trainer, 2.0, baseline=False)
    trainer.train(3)
    at_key = trainer.snapshot()
    side.save(trainer, 3.0, baseline=False)
    trainer.train(4)
    before = trainer.snapshot()
    emb = trainer.embeddings
    mine = emb.shard_rows(1)
    side.restore_shards(trainer, 3.0, (1,))
    since_checkpoint, since_baseline = side.since_checkpoint.copy(), side.since_baseline.copy()
    held = np.isin(mine, np.concatenate([stored.rows for stored in side.chain[1:]]))
    # the oracle: a full restore of the same chain (tested on its own: exact in fp32)
    oracle, _ = _side(bits, differential)
    oracle.restore(before)
    side.restore(oracle, 3.0)
    weights, accum = _rows_of(trainer, mine)
    assert np.array_equal(weights, oracle.embeddings.weights[mine])
    assert np.array_equal(accum, oracle.embeddings.state["accum"][mine])
    if bits == "null":
        assert np.array_equal(weights, at_key.embeddings.values[mine])
    else:
        assert not np.array_equal(weights, at_key.embeddings.values[mine])  # dequantized
    assert not np.array_equal(weights, before.embeddings.values[mine])  # updates were lost
    # every other row, the dense state and the step are untouched
    others = np.setdiff1d(np.arange(emb.n_rows), mine)
    assert np.array_equal(emb.weights[others], before.embeddings.values[others])
    assert np.array_equal(emb.state["accum"][others], before.embeddings.state["accum"][others])
    for a, b in zip(trainer.model.params, before.dense, strict=True):
        assert np.array_equal(a, b)
    assert trainer.step == before.step
    # the shard's rows: unchanged since the checkpoint, changed since the baseline where a
    # differential checkpoint of the chain holds them
    assert not since_checkpoint[mine].any()
    assert np.array_equal(since_baseline[mine], held) and held.any() and not held.all()


@pytest.mark.parametrize("differential", ["one_shot", "consecutive"])
def test_differential_checkpoints_after_a_shard_restore_still_restore_exactly(differential):
    trainer, side = _side("null", differential)
    trainer.train(3)
    side.save(trainer, 1.0, baseline=True)
    trainer.train(3)
    side.save(trainer, 2.0, baseline=False)
    trainer.train(3)
    side.restore_shards(trainer, 2.0, (1, 3))
    trainer.train(2)
    saved = trainer.snapshot()
    side.save(trainer, 3.0, baseline=False)
    trainer.train(4)
    side.restore(trainer, 3.0)
    assert np.array_equal(trainer.embeddings.weights, saved.embeddings.values)
    assert np.array_equal(trainer.embeddings.state["accum"], saved.embeddings.state["accum"])


# -- the co-simulation -----------------------------------------------------------------------

TINY_TRAINER = (
    "trainer={steps: 40, batch_size: 32, replications: 1, eval_samples: 512,"
    " model: {embedding_dim: 4, bottom_mlp: [8, 4], top_mlp: [8, 1]},"
    " data: {kind: synthetic, row_cap: 200}}"
)


def test_the_trainer_loses_exactly_the_shards_lookups_since_the_checkpoint():
    # smoke's 4 h in 40 steps of 6 min; checkpoints every hour; PS 1 fails at 95 min
    s = scenario(
        "smoke",
        TINY_TRAINER,
        "failures=[{kind: scheduled, times: [95 min], nodes: [[emb_ps1]]}]",
        "policies=[{kind: checknrun, interval: 1 h, recovery: partial}]",
    )
    sim = simulate(s, 0, 0)
    [restore] = _restores(sim)
    assert restore.key == 3600.0 and restore.shards == (1,)
    base, [model] = run_models(s, [sim])
    saved_step, failed_step = model.step_of(sim.model_events[0]), model.step_of(restore)
    assert (saved_step, failed_step) == (10, 16)
    # by hand: the lookups of PS 1's rows in steps 11 … 16 of the failure-free trainer
    alone = Trainer(trainer_config(s, 0))
    rows = alone.embeddings.shard_rows(1)
    alone.train(saved_step)
    counted = alone.mfu.counts[rows].sum()
    alone.train(failed_step - saved_step)
    lost = int(alone.mfu.counts[rows].sum() - counted)
    assert lost > 0 and model.lost_lookups == lost
    [columns] = cosimulate(s, [sim])
    tables = len(base.embeddings.table_sizes)  # the trainer's own (26 Criteo-like)
    assert columns["pls_measured"] == lost / (40 * 32 * tables)  # steps × batch × tables
    assert columns["logloss_delta"] != 0
    assert [type(e) for e in sim.model_events].count(DiffCheckpoint) == 3
