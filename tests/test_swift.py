"""SWIFT: undo + replica for trainers, checkpoint + log replay for shards; logging budget with
the unlogged updates recomputed (rollback to the end of the logged share) or dropped."""

from collections import defaultdict

import numpy as np
import pytest

from ftsim.cosim.replay import cosimulate, run_models, trainer_config
from ftsim.experiments.runner import simulate
from ftsim.policies.events import Checkpoint, RestoreAll
from ftsim.policies.swift import ReplayShards, UndoStep
from ftsim.trainer import Trainer
from ftsim.trainer.update_log import UpdateLog
from tests.conftest import scenario
from tests.test_cosim import SMALL_TRAINER

FAILURES = (
    "failures=[{kind: scheduled, times: [5 h, 20 h, 33 h],"
    " nodes: [[emb_ps1, emb_ps2], [trainer3], [emb_ps2]]}]"
)
SWIFT = "policies=[{kind: full}, {kind: swift, interval: 9 h}]"
AT_5H = "failures=[{kind: scheduled, times: [5 h], nodes: [[emb_ps1, emb_ps2]]}]"
"""One failure of two shards before the first checkpoint: at progress 5 h exactly."""
H = 3600.0


def _swift(*extra):
    return scenario("prod50h", SWIFT, FAILURES, *extra)


def _replay_s(sim, logged_s, shards, machines=1):
    """Independent formula: the longer of reading the logs (one flow per machine) and
    applying them (``replay_compute_frac`` = 0.05 iterations per logged iteration)."""
    policy, layout = sim.policy.plan, sim.layout
    flow = logged_s / policy.iteration_s * policy.log_step_bytes / machines
    return max(layout.read_s([flow] * (shards * machines)), logged_s * 0.05 / machines)


def test_shard_recovery_reloads_and_replays_the_log():
    sim = simulate(_swift(), 1, 0)
    row = sim.row()
    # First failure at 5 h (before any checkpoint): 5 h of iterations logged, replayed.
    assert sim.policy.replay_s[0] == pytest.approx(_replay_s(sim, 5 * H, shards=2))
    assert row["pls_model"] == 0 and row["lost_h"] < 1e-3  # full log: nothing lost, no rollback
    assert row["rollbacks"] == 0
    assert row["log_bytes"] == pytest.approx(18 * sim.policy.plan.log_step_bytes * 50 * H / 0.1)


def test_replay_spread_over_machines_is_faster():
    one = simulate(_swift(), 1, 0)
    four = simulate(_swift("policies.1.replay_machines=4"), 1, 0)
    # The first failure finds the same log (later ones differ: recovery shifts progress);
    # four machines per shard apply 4x faster but share the storage's read bandwidth.
    assert four.policy.replay_s[0] < one.policy.replay_s[0]
    assert four.policy.replay_s[0] == pytest.approx(_replay_s(four, 5 * H, 2, machines=4))


def test_a_recovered_shard_replays_from_its_checkpoint_again():
    """Same shard at 2 h and 8 h: the second recovery replays the log since the checkpoint
    (progress 0), not since the first recovery, so it costs a single failure's recovery."""

    def run(*times):
        nodes = ", ".join("[emb_ps3]" for _ in times)
        failures = f"failures=[{{kind: scheduled, times: [{', '.join(times)}], nodes: [{nodes}]}}]"
        return simulate(scenario("prod50h", SWIFT, failures), 1, 0)

    single, double = run("8 h"), run("2 h", "8 h")
    first, second = [e for e in double.model_events if isinstance(e, ReplayShards)]
    assert first.key == second.key == 0.0 and first.progress_s == 2 * H
    # the second replay covers everything since the checkpoint, not since the first failure
    assert double.policy.replay_s[1] == pytest.approx(_replay_s(double, second.progress_s, 1))
    assert double.policy.replay_s[1] > _replay_s(double, second.progress_s - 2 * H, 1)
    # so the second failure alone costs (almost: it comes at slightly less progress) what
    # the single failure at 8 h costs, and both failures together more than the single one
    ratio = second.progress_s / (8 * H)
    assert double.policy.replay_s[1] == pytest.approx(single.policy.replay_s[0] * ratio)
    assert sum(double.policy.recovery_s) > single.policy.recovery_s[0] * (1 + 0.2)
    assert double.row()["load_h"] > single.row()["load_h"]


def test_logging_competes_with_checkpoint_writes():
    quiet = simulate(_swift("policies.1.unique_lookup_fraction=0.01"), 1, 0).policy.plan
    busy = simulate(_swift("policies.1.unique_lookup_fraction=1"), 1, 0).policy.plan
    assert busy.save_s > quiet.save_s


def test_a_log_that_fills_the_storage_bandwidth_is_said():
    """This SWIFT's log (every touched row: 2.77 GB/s) within prod50h's 4 GB/s of storage says
    nothing; at 2 GB/s the log takes it all (training slows to it, saves get the 1% floor):
    a notice with both rates."""
    from ftsim.experiments.sweep import policy_notices

    assert policy_notices(_swift()) == []
    slow = _swift("cluster.storage.write_bandwidth=2 GB/s")
    (notice,) = policy_notices(slow)
    plan = simulate(slow, 1, 0).policy.plan
    assert plan.log_rate_Bps == pytest.approx(2.77e9, rel=2e-3) and plan.log_slowdown > 0
    assert str(notice).startswith(
        "swift: its update log writes 2.77 GB/s, not less than the storage's write bandwidth "
        "(2 GB/s)"
    )


def test_trainer_failure_costs_an_undo_and_a_replica_copy():
    s = _swift("failures=[{kind: scheduled, times: [20 h], nodes: [[trainer3]]}]")
    sim = simulate(s, 1, 0)
    row = sim.row()
    copy_s = sim.layout.nic_s(sim.layout.dense_bytes)
    assert row["load_h"] * 3600 == pytest.approx(sim.policy.plan.undo_s + copy_s)
    assert row["lost_h"] * 3600 == pytest.approx(0.05)  # half an iteration redone


# ------------------------------------------------------------------ selective logging
def test_recompute_rolls_back_to_the_end_of_the_logged_share():
    """b = 0.3 of 9 h: the failure at 5 h is 2.3 h past the logged 2.7 h. Every node
    reloads, every shard replays its 2.7 h prefix, the 2.3 h since are re-executed."""
    full = simulate(scenario("prod50h", SWIFT, AT_5H), 1, 0)
    sim = simulate(scenario("prod50h", SWIFT, AT_5H, "policies.1.log_budget=0.3"), 1, 0)
    row, policy, layout = sim.row(), sim.policy.plan, sim.layout
    dense_s = policy.save_time_s([layout.dense_bytes])  # the snapshot's stall at 2.7 h
    assert row["rollbacks"] == 1 and row["pls_model"] == 0
    assert row["lost_h"] * H == pytest.approx(5 * H - dense_s - 2.7 * H)
    reload_s = layout.read_s([layout.shard_bytes] * 18 + [layout.dense_bytes] * 20)
    assert sim.policy.replay_s == [pytest.approx(_replay_s(sim, 2.7 * H, shards=18))]
    assert row["load_h"] * H == pytest.approx(reload_s + sim.policy.replay_s[0])
    assert sim.model_events[:2] == [
        Checkpoint(2.7 * H, key=2.7 * H),  # the whole state at 2.7 h: dense saved, shards logged
        RestoreAll(5 * H - dense_s, key=2.7 * H),
    ]
    # dearer than replaying a full log
    assert row["overhead_frac"] > full.row()["overhead_frac"]
    assert row["load_h"] + row["lost_h"] > full.row()["load_h"]
    # saves: 5 shard checkpoints (9 h ... 45 h), 6 dense snapshots (2.7 h ... 47.7 h)
    assert sum(isinstance(e, Checkpoint) for e in sim.model_events) == 5 + 6
    assert row["n_checkpoints"] == 5
    assert row["save_h"] * H == pytest.approx(5 * policy.save_s + 6 * dense_s)


def test_recompute_with_no_log_rolls_back_to_the_checkpoint():
    sim = simulate(scenario("prod50h", SWIFT, AT_5H, "policies.1.log_budget=0"), 1, 0)
    row, policy, layout = sim.row(), sim.policy.plan, sim.layout
    assert row["lost_h"] == pytest.approx(5) and row["rollbacks"] == 1
    assert RestoreAll(5 * H, key=0.0) in sim.model_events
    assert sum(isinstance(e, Checkpoint) for e in sim.model_events) == row["n_checkpoints"] == 5
    # the dense copy is written with each checkpoint, in the same transfer
    with_dense = policy.save_time_s([layout.shard_bytes] * 18 + [layout.dense_bytes])
    assert row["save_h"] * H == pytest.approx(5 * with_dense)


def test_smaller_budget_writes_less_replays_less_and_recomputes_or_loses():
    budgets = (1, 0.5, 0.1)
    drop = [simulate(_swift(f"policies.1.log_budget={b}", "policies.1.unlogged=drop"), 1, 0)
            for b in budgets]  # fmt: skip
    rec = [simulate(_swift(f"policies.1.log_budget={b}"), 1, 0).row() for b in budgets]
    rows = [sim.row() for sim in drop]
    assert rows[0]["log_bytes"] > rows[1]["log_bytes"] > rows[2]["log_bytes"]
    assert rows[0]["replay_s"] >= rows[1]["replay_s"] > rows[2]["replay_s"]
    assert rows[0]["pls_model"] == 0 < rows[1]["pls_model"] < rows[2]["pls_model"]
    assert [r["log_bytes"] for r in rec] == [r["log_bytes"] for r in rows]
    assert all(r["pls_model"] == 0 for r in rec)  # recompute loses nothing, pays in time
    assert rec[0]["overhead_frac"] < rec[1]["overhead_frac"] < rec[2]["overhead_frac"]
    assert rows[1]["overhead_frac"] < rec[1]["overhead_frac"]
    # drop: the time model's pls_model is the closed form over the failed shards' intervals,
    # sum of (progress at the last failure - checkpoint - b T) / (work E)
    for b, sim in zip(budgets[1:], drop[1:], strict=True):
        last: dict[tuple[int, float], float] = {}
        for e in sim.model_events:
            if isinstance(e, ReplayShards):
                last.update({(shard, e.key): e.progress_s for shard in e.shards})
        lost = sum(max(0.0, p - key - b * 9 * H) for (_, key), p in last.items())
        assert sim.row()["pls_model"] == pytest.approx(lost / (50 * H * 18), rel=1e-12)
        assert last[1, 0.0] == 5 * H  # the first failure, before any save or recovery


# ------------------------------------------------------------------ on the trainer
def record_replays(monkeypatch) -> list[tuple[int, int, int]]:
    """From now on, every log replay appends (trainer step, steps replayed, steps lost)."""
    reports = []
    replay = UpdateLog.replay

    def recording(log, shard):
        report = replay(log, shard)
        reports.append((log.trainer.step, report.replayed_steps, report.lost_steps))
        return report

    monkeypatch.setattr(UpdateLog, "replay", recording)
    return reports


def _assert_same_model(base, trainer):
    for a, b in zip(base.model.params, trainer.model.params, strict=True):
        assert a.tobytes() == b.tobytes()
    assert base.embeddings.weights.tobytes() == trainer.embeddings.weights.tobytes()


def test_full_logging_reproduces_the_failure_free_model():
    s = _swift(
        SMALL_TRAINER, "trainer.optimizer={dense: {kind: momentum}, sparse: {kind: momentum}}"
    )
    sims = [simulate(s, i, 0) for i in range(2)]
    kinds = [type(e) for e in sims[1].model_events]
    assert kinds.count(ReplayShards) == 2 and kinds.count(UndoStep) == 1
    base, [_, model] = run_models(s, sims)
    for a, b in zip(base.model.params, model.trainer.model.params, strict=True):
        assert np.abs(a - b).max() <= 1e-5 * max(np.abs(a).max(), 1e-12)  # undo's roundoff
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
    dropped = "policies.1.unlogged=drop"
    partial = _swift(SMALL_TRAINER, SHARDS_ONLY, "policies.1.log_budget=0.5", dropped)
    sim = simulate(partial, 1, 0)
    replays = [e for e in sim.model_events if isinstance(e, ReplayShards)]
    assert replays and not any(e.exact for e in replays)
    _, [model] = run_models(partial, [sim])
    assert model.own_steps == partial.trainer.steps
    # recompute: the trainer-side logs keep every step (failures after the logged share
    # roll back instead), so replays and rollbacks are exact and nothing is trained
    recompute = _swift(SMALL_TRAINER, SHARDS_ONLY, "policies.1.log_budget=0.5")
    sim = simulate(recompute, 1, 0)
    kinds = {type(e) for e in sim.model_events}
    assert {ReplayShards, RestoreAll} <= kinds
    assert all(e.exact for e in sim.model_events if isinstance(e, ReplayShards))
    _, [model] = run_models(recompute, [sim])
    assert model.trainer is None and model.own_steps == 0
    undo = _swift(SMALL_TRAINER)  # full log, but a trainer fails: its undo is not exact
    _, [model] = run_models(undo, [simulate(undo, 1, 0)])
    assert model.own_steps == undo.trainer.steps + 1  # the undone step is trained again


def test_full_logging_is_bit_exact_after_two_failures_of_a_shard(monkeypatch):
    """Shard 3 fails at 2 h and 8 h, before the first checkpoint: the second replay
    re-applies every step since step 0, and the final model is the failure-free one."""
    failures = "failures=[{kind: scheduled, times: [2 h, 8 h], nodes: [[emb_ps3], [emb_ps3]]}]"
    s = scenario(  # retrained (a full log is exact: shared, SWIFT would not be trained)
        "prod50h", SWIFT, failures, SMALL_TRAINER, "trainer.optimizer.sparse.kind=momentum",
        "trainer.share_prefix=false",
    )  # fmt: skip
    sims = [simulate(s, i, 0) for i in range(2)]
    reports = record_replays(monkeypatch)
    base, [_, model] = run_models(s, sims)
    # progress 2 h and ~7.9 h of 50 h in 120 steps: every step since step 0 is replayed
    assert reports == [(5, 5, 0), (19, 19, 0)]
    _assert_same_model(base, model.trainer)


def test_recompute_loses_nothing_and_keeps_the_failure_free_model():
    s = scenario("prod50h", SWIFT, SMALL_TRAINER, AT_5H, "policies.1.log_budget=0.3")
    sims = [simulate(s, i, 0) for i in range(2)]
    assert {type(e) for e in sims[1].model_events} == {Checkpoint, RestoreAll}
    base, [_, model] = run_models(s, sims)
    assert model.trainer is None  # exact rollbacks only: the failure-free run is reused
    _, swift = cosimulate(s, sims)
    assert swift["logloss_delta"] == 0 and swift["pls_measured"] == 0
    # with a trainer failure and failures inside the logged share, on its own trainer
    s = _swift(SMALL_TRAINER, "policies.1.log_budget=0.3")
    sims = [simulate(s, i, 0) for i in range(2)]
    assert {RestoreAll, ReplayShards, UndoStep} <= {type(e) for e in sims[1].model_events}
    _, swift = cosimulate(s, sims)
    assert swift["pls_measured"] == 0 and abs(swift["logloss_delta"]) < 1e-5  # undo's roundoff


def test_drop_loses_exactly_the_lookups_of_the_unlogged_steps():
    """Lost lookups on the trainer = lookups of the failed shards' rows in the unlogged
    steps of their intervals, each step once (shard 2 fails twice in the first interval)."""
    failures = (
        "failures=[{kind: scheduled, times: [5 h, 7 h, 20 h, 33 h],"
        " nodes: [[emb_ps1, emb_ps2], [emb_ps2], [trainer3], [emb_ps2]]}]"
    )
    s = scenario(
        "prod50h", SWIFT, failures, SMALL_TRAINER, "policies.1.log_budget=0.3",
        "policies.1.unlogged=drop",
    )  # fmt: skip
    sims = [simulate(s, i, 0) for i in range(2)]
    _, [_, model] = run_models(s, sims)
    # lookups per step and shard: the batches do not depend on the trajectory
    probe = Trainer(trainer_config(s, 0))
    lookups = np.zeros((s.trainer.steps, probe.n_shards), dtype=np.int64)

    def count(update):
        shard = probe.embeddings.shard_of_global(update.rows)
        lookups[update.step] = np.bincount(shard, update.counts, probe.n_shards)

    probe.add_update_listener(count)
    probe.train(s.trainer.steps)
    budget = round(0.3 * 9 / 50 * s.trainer.steps)
    counted: dict[tuple[int, int], int] = defaultdict(int)
    expect = 0
    for e in sims[1].model_events:
        if isinstance(e, ReplayShards):
            c, f = round(e.key / s.job.work_s * s.trainer.steps), model.step_of(e)
            for shard in e.shards:
                start = max(c + budget, counted[shard, c])
                expect += int(lookups[start:f, shard].sum())
                counted[shard, c] = max(counted[shard, c], f)
    assert expect > 0 and model.lost_lookups == expect  # pls_measured = that / all lookups
