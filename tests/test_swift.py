"""SWIFT: undo + replica for trainers, checkpoint + log replay for shards; logging budget."""

import numpy as np
import pytest

from ftsim.cosim.replay import cosimulate, run_models
from ftsim.policies.swift import ReplayShards, UndoStep
from ftsim.sim.engine import simulate
from tests.conftest import scenario
from tests.test_cosim import SMALL_TRAINER

FAILURES = (
    "failures=[{kind: scheduled, times: [5 h, 20 h, 33 h],"
    " nodes: [[emb_ps1, emb_ps2], [trainer3], [emb_ps2]]}]"
)
SWIFT = "policies=[{kind: full}, {kind: swift, checkpoint_interval: 9 h}]"


def _swift(*extra):
    return scenario("prod50h", SWIFT, FAILURES, *extra)


def test_shard_recovery_reloads_and_replays_the_log():
    sim = simulate(_swift(), 1, 0)
    row = sim.row()
    policy = sim.policy
    # First failure at 5 h (before any checkpoint): 5 h of iterations logged, replayed.
    first_replay = policy.replay_s[0]
    logged_iterations = 5 * 3600 / 0.1
    expected = logged_iterations * policy.replay_iteration_s
    assert first_replay == pytest.approx(expected, rel=1e-3)
    assert row["pls_model"] == 0 and row["lost_h"] < 1e-3  # full log: nothing lost, no rollback
    assert row["log_bytes"] == pytest.approx(18 * policy.log_step_bytes * 50 * 3600 / 0.1)


def test_replay_spread_over_machines_is_faster():
    one = simulate(_swift(), 1, 0).policy
    four = simulate(_swift("policies.1.replay_machines=4"), 1, 0).policy
    # The first failure finds the same log (later ones differ: recovery shifts progress).
    assert four.replay_s[0] == pytest.approx(one.replay_s[0] / 4)


def test_smaller_budget_writes_less_replays_faster_and_loses_updates():
    rows = [simulate(_swift(f"policies.1.log_budget={b}"), 1, 0).row() for b in (1, 0.5, 0.1)]
    assert rows[0]["log_bytes"] > rows[1]["log_bytes"] > rows[2]["log_bytes"]
    assert rows[0]["replay_s"] >= rows[1]["replay_s"] > rows[2]["replay_s"]
    assert rows[0]["pls_model"] == 0 < rows[1]["pls_model"] < rows[2]["pls_model"]


def test_logging_competes_with_checkpoint_writes():
    quiet = simulate(_swift("policies.1.unique_lookup_fraction=0.01"), 1, 0).policy
    busy = simulate(_swift("policies.1.unique_lookup_fraction=1"), 1, 0).policy
    assert busy.save_s > quiet.save_s


def test_trainer_failure_costs_an_undo_and_a_replica_copy():
    s = _swift("failures=[{kind: scheduled, times: [20 h], nodes: [[trainer3]]}]")
    sim = simulate(s, 1, 0)
    row = sim.row()
    copy_s = sim.layout.nic_s(sim.layout.dense_bytes)
    assert row["load_h"] * 3600 == pytest.approx(sim.policy.undo_s + copy_s)
    assert row["lost_h"] * 3600 == pytest.approx(0.05)  # half an iteration redone


def test_full_logging_reproduces_the_failure_free_model():
    s = _swift(
        SMALL_TRAINER, "trainer.optimizer={dense: {kind: momentum}, sparse: {kind: momentum}}"
    )
    sims = [simulate(s, i, 0) for i in range(2)]
    kinds = [type(e) for e in sims[1].model_events]
    assert kinds.count(ReplayShards) == 2 and kinds.count(UndoStep) == 1
    base, [_, model] = run_models(s, sims)
    for a, b in zip(base.model.params, model.trainer.model.params, strict=True):
        assert np.abs(a - b).max() <= 1e-5 * max(np.abs(a).max(), 1e-12)
    a, b = base.embeddings.weights, model.trainer.embeddings.weights
    assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max()
    _, swift = cosimulate(s, sims)
    assert swift["pls_measured"] == 0 and abs(swift["logloss_delta"]) < 1e-5


SHARDS_ONLY = (
    "failures=[{kind: scheduled, times: [5 h, 20 h, 33 h, 41 h],"
    " nodes: [[emb_ps1, emb_ps2], [emb_ps7], [emb_ps2], [emb_ps3, emb_ps4]]}]"
)
"""Shard failures only, one before the first checkpoint and one twice the same shard."""


@pytest.mark.parametrize("sparse", ["sgd", "momentum", "rowwise_adagrad"])
def test_a_full_log_replays_the_failure_free_model_bit_for_bit_so_it_is_not_retrained(sparse):
    """The claim behind not training SWIFT with a full log: retrained on its own trainer
    (``share_prefix: false``), its final model is the failure-free one bit for bit, for
    every row-wise optimizer. With sharing, it is not trained and its columns are the same."""
    optimizer = f"trainer.optimizer={{dense: {{kind: momentum}}, sparse: {{kind: {sparse}}}}}"
    alone = _swift(SMALL_TRAINER, SHARDS_ONLY, optimizer, "trainer.share_prefix=false")
    sims = [simulate(alone, i, 0) for i in range(2)]
    replays = [e for e in sims[1].model_events if isinstance(e, ReplayShards)]
    assert len(replays) == 4 and all(e.exact for e in replays)
    base, [_, model] = run_models(alone, sims)
    assert model.own_steps == alone.trainer.steps
    want, got = base.snapshot(), model.trainer.snapshot()
    for a, b in zip(want.dense + want.dense_state, got.dense + got.dense_state, strict=True):
        assert np.array_equal(a, b)
    assert np.array_equal(want.embeddings.values, got.embeddings.values)
    for name, values in want.embeddings.state.items():
        assert np.array_equal(values, got.embeddings.state[name])
    retrained = cosimulate(alone, sims)
    shared = _swift(SMALL_TRAINER, SHARDS_ONLY, optimizer)
    sims = [simulate(shared, i, 0) for i in range(2)]
    _, [_, lazy] = run_models(shared, sims)
    assert lazy.trainer is None and lazy.own_steps == 0
    columns = cosimulate(shared, sims)
    assert [{**c, "trainer_own_steps": 0} for c in retrained] == columns
    assert columns[1]["logloss_delta"] == 0 and columns[1]["pls_measured"] == 0


def test_a_partial_log_or_an_undo_is_not_exact_and_is_retrained():
    partial = _swift(SMALL_TRAINER, SHARDS_ONLY, "policies.1.log_budget=0.5")
    sim = simulate(partial, 1, 0)
    assert not any(e.exact for e in sim.model_events if isinstance(e, ReplayShards))
    _, [model] = run_models(partial, [sim])
    assert model.own_steps == partial.trainer.steps
    undo = _swift(SMALL_TRAINER)  # full log, but a trainer fails: its undo is not exact
    _, [model] = run_models(undo, [simulate(undo, 1, 0)])
    assert model.own_steps == undo.trainer.steps + 1  # the undone step is trained again


def test_a_reduced_budget_loses_exactly_what_the_model_says():
    s = _swift(SMALL_TRAINER, "policies.1.log_budget=0.3")
    sims = [simulate(s, i, 0) for i in range(2)]
    _, swift = cosimulate(s, sims)
    row = sims[1].row()
    assert swift["pls_measured"] > 0
    # The trainer loses the updates of the unlogged steps; the time model's estimate is the
    # unlogged share of compute on the failed shards (a proxy for lookups): same order.
    assert swift["pls_measured"] == pytest.approx(row["pls_model"], rel=0.35)
