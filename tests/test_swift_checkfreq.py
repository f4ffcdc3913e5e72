"""SWIFT with CheckFreq's snapshot and persist (``save_mode: checkfreq``): training stalls for
the in-memory snapshot only, the persist competes with the update log for storage, and a
checkpoint is the base of replays (and rollbacks) only once committed."""

import numpy as np
import pytest

from ftsim.cosim.replay import PolicyModel, run_models, trainer_config
from ftsim.experiments.runner import simulate
from ftsim.policies.events import Checkpoint, Commit, RestoreAll, Snapshot
from ftsim.policies.swift import ReplayShards
from ftsim.trainer import Trainer
from ftsim.trainer.update_log import UpdateLog
from tests.conftest import scenario
from tests.test_cosim import SMALL_TRAINER
from tests.test_swift import _replay_s, record_replays
from tests.trainer.conftest import small_config
from tests.trainer.test_update_log import StepRecorder, corrupt_shard, model_state

H = 3600.0
SYNC = "policies=[{kind: full}, {kind: swift, interval: 9 h}]"
CHECKFREQ = "policies=[{kind: full}, {kind: swift, interval: 9 h, save_mode: checkfreq}]"
SLOW = "cluster.storage.write_bandwidth_per_node=2 MB/s"
"""Each node writes to storage at 2 MB/s: a shard's persist takes 3.4 h, a dense one 80 s
(room for a failure in the middle, and for trainer steps between snapshot and failure)."""
NO_TRAINER = "trainer.enabled=false"
COPY_BPS = 55e9
"""The default snapshot rate: half prod50h's default memory bandwidth of 110 GB/s."""


def _events(sim, kind):
    return [e for e in sim.model_events if isinstance(e, kind)]


def _persists(*extra):
    """Persist phases of the failure-free run: until a failure, every run with these
    overrides has the same timeline."""
    sim = simulate(scenario("prod50h", *extra, "failures=[]", NO_TRAINER), 1, 0)
    return [p for p in sim.timeline if p.category == "persist"]


def _failing(times_s, nodes):
    """Scheduled failures of these node lists at these wall times (seconds)."""
    times = ", ".join(f"{t!r} s" for t in times_s)
    return f"failures=[{{kind: scheduled, times: [{times}], nodes: [{', '.join(nodes)}]}}]"


def _mid(persist):
    return (persist.start_s + persist.end_s) / 2


# ------------------------------------------------------------------ time model
@pytest.mark.parametrize("unique", [0.01, 1.0])
def test_checkfreq_stalls_for_the_snapshot_while_the_persist_shares_storage_with_the_log(unique):
    """No failures: per checkpoint training stalls for the 24.6 GB shard's copy at 55 GB/s
    (0.45 s, against the write's ≈ 110 s or more), and the persist behind lasts what the
    shards' write takes with the storage bandwidth the update log leaves."""
    log_rows = f"policies.1.unique_lookup_fraction={unique}"
    sync = simulate(scenario("prod50h", SYNC, log_rows, "failures=[]", NO_TRAINER), 1, 0)
    sim = simulate(scenario("prod50h", CHECKFREQ, log_rows, "failures=[]", NO_TRAINER), 1, 0)
    policy, layout = sim.policy.plan, sim.layout
    snapshot_s = layout.shard_bytes / COPY_BPS
    assert sim.policy.writer.snapshot_s == pytest.approx(snapshot_s)
    n = sim.row()["n_checkpoints"]
    assert n == sync.row()["n_checkpoints"] == 5
    assert sim.row()["save_h"] * H == pytest.approx(n * snapshot_s, rel=1e-9)
    assert sync.row()["save_h"] * H == pytest.approx(n * policy.save_s, rel=1e-9)
    persists = [p.end_s - p.start_s for p in sim.timeline if p.category == "persist"]
    assert len(persists) == len(_events(sim, Commit)) == len(_events(sim, Snapshot)) == n
    # the persist gets what the log leaves of the storage's 4 GB/s
    assert persists == [pytest.approx(policy.save_s, rel=1e-6)] * n
    alone = layout.write_s([layout.shard_bytes] * 18)
    log_share = policy.log_rate_Bps / 4e9
    assert policy.save_s == pytest.approx(alone / (1 - log_share), rel=1e-3)
    assert sim.row()["other_h"] == 0  # the log alone does not throttle training here


def test_a_snapshot_waits_for_the_previous_persist():
    """``recompute`` with b = 0.2: the dense snapshot due 1.8 h after each checkpoint waits
    for the checkpoint's 3.4-h persist (charged to save), then stalls for its own copy."""
    sim = simulate(scenario("prod50h", CHECKFREQ, SLOW, "policies.1.log_budget=0.2",
                            "failures=[]", NO_TRAINER), 1, 0)  # fmt: skip
    waits = [p for p in sim.timeline if p.detail == "wait for persist"]
    persists = [p for p in sim.timeline if p.category == "persist"]
    assert len(waits) == 5
    for wait in waits:
        [persist] = [p for p in persists if p.start_s < wait.start_s < p.end_s]
        assert wait.end_s == persist.end_s
    dense_copy_s = sim.layout.dense_bytes / COPY_BPS
    snapshots_s = 5 * sim.layout.shard_bytes / COPY_BPS + 6 * dense_copy_s
    waited_s = sum(w.end_s - w.start_s for w in waits)
    assert sim.row()["save_h"] * H == pytest.approx(snapshots_s + waited_s, rel=1e-9)
    keys = [e.key for e in _events(sim, Snapshot)]
    assert keys[:3] == [pytest.approx(k * H) for k in (1.8, 9, 10.8)]  # stalled in place


def test_a_failure_during_the_persist_replays_the_log_since_the_previous_checkpoint():
    """Shard 2 fails in the middle of the 18-h checkpoint's persist: that checkpoint is lost,
    the shard reloads the 9-h one and replays the whole log since (not since 18 h), nothing
    is lost (full log), and the checkpoint is taken again right after the recovery."""
    second = _persists(CHECKFREQ, SLOW)[1]
    sim = simulate(scenario("prod50h", CHECKFREQ, SLOW, NO_TRAINER,
                            _failing([_mid(second)], ["[emb_ps2]"])), 1, 0)  # fmt: skip
    [replay] = _events(sim, ReplayShards)
    snapshots = [e.key for e in _events(sim, Snapshot)]
    commits = [e.key for e in _events(sim, Commit)]
    assert snapshots[:2] == [9 * H, 18 * H] and commits[:1] == [9 * H]
    assert 18 * H not in commits  # lost with its persist
    assert replay.key == 9 * H and replay.shards == (2,) and replay.exact
    assert replay.progress_s > 18 * H + 1.5 * H  # 1.7 h into the persist, at 2 MB/s
    logged = replay.progress_s - 9 * H
    assert sim.policy.replay_s == [pytest.approx(_replay_s(sim, logged, shards=1))]
    assert sim.policy.replay_s[0] > 1.5 * _replay_s(sim, replay.progress_s - 18 * H, shards=1)
    assert sim.row()["pls_model"] == 0 and sim.row()["lost_h"] == 0
    # due 9 h after the durable checkpoint, i.e. now: snapshotted again once recovered
    assert snapshots[2] == replay.progress_s and commits[1] == replay.progress_s
    assert sim.row()["n_checkpoints"] == len(commits)


def test_a_trainer_failure_during_a_shard_persist_does_not_lose_it():
    """The 18-h shard checkpoints are written by the PS: a trainer failing in the middle of
    their persist (replaced from a replica, its in-flight step undone) leaves the persist
    running, and it commits; a PS failing at the same instant loses it."""
    second = _persists(CHECKFREQ, SLOW)[1]

    def failing(node):
        failure = _failing([_mid(second)], [f"[{node}]"])
        return simulate(scenario("prod50h", CHECKFREQ, SLOW, NO_TRAINER, failure), 1, 0)

    runs = {node: failing(node) for node in ("trainer3", "emb_ps2")}
    kept = [e.key for e in _events(runs["trainer3"], Commit)]
    lost = [e.key for e in _events(runs["emb_ps2"], Commit)]
    assert kept[:2] == [9 * H, 18 * H] and 18 * H not in lost
    persists = [p for p in runs["trainer3"].timeline if p.category == "persist"]
    [persist] = [p for p in persists if p.start_s == second.start_s]
    assert persist.end_s == second.end_s  # the replica copy crosses none of its links
    assert runs["trainer3"].row()["n_checkpoints"] == len(kept)


def test_recompute_rolls_back_to_the_last_durable_dense_snapshot():
    """b = 0.5. A shard failure during the 18-h checkpoint's persist is 10.7 h after the
    durable checkpoint (9 h), past its logged share: the job rolls back to the dense snapshot
    at 13.5 h (shards: the 9-h checkpoint and 4.5 h of log). A failure during the persist of
    the 13.5-h dense snapshot loses it: the job goes back to the previous one, at 4.5 h
    (shards: the initial state and its log), and the 9-h checkpoint is taken again."""
    budget = "policies.1.log_budget=0.5"
    persists = _persists(CHECKFREQ, SLOW, budget)  # dense 4.5 h, ckpt 9 h, dense 13.5 h, 18 h
    assert [round(p.end_s - p.start_s) for p in persists[:4]] == [80, 12298, 80, 12298]
    for persist, key_h, at_h, base_h in ((persists[3], 13.5, 19.7, 9), (persists[2], 4.5, 13.5, 0)):
        failure = _failing([_mid(persist)], ["[emb_ps2]"])
        sim = simulate(scenario("prod50h", CHECKFREQ, SLOW, budget, failure, NO_TRAINER), 1, 0)
        [rollback] = _events(sim, RestoreAll)
        row, policy = sim.row(), sim.policy
        assert rollback.key == key_h * H and row["rollbacks"] == 1 and row["pls_model"] == 0
        assert row["lost_h"] == pytest.approx(rollback.progress_s / H - key_h)
        assert rollback.progress_s / H == pytest.approx(at_h, abs=0.1)
        prefix_s = (key_h - base_h) * H
        assert policy.replay_s == [pytest.approx(_replay_s(sim, prefix_s, shards=18))]
        # the next checkpoint: 9 h after the one its shards were rebuilt from
        later = sim.model_events[sim.model_events.index(rollback) :]
        assert [e.key for e in later if isinstance(e, Commit)][0] == (base_h + 9) * H


def test_drop_loses_the_updates_after_the_durable_checkpoint_s_logged_share():
    """b = 0.5, drop: shard 2 fails during the 18-h persist; its replay from the 9-h
    checkpoint stops at 13.5 h, and everything since is lost (the log after the 18-h
    snapshot lies beyond the gap)."""
    drop = ("policies.1.log_budget=0.5", "policies.1.unlogged=drop")
    second = _persists(CHECKFREQ, SLOW, *drop)[1]  # no dense snapshots in drop mode
    failure = _failing([_mid(second)], ["[emb_ps2]"])
    sim = simulate(scenario("prod50h", CHECKFREQ, SLOW, *drop, failure, NO_TRAINER), 1, 0)
    [replay] = _events(sim, ReplayShards)
    assert replay.key == 9 * H and not replay.exact
    assert sim.policy.replay_s == [pytest.approx(_replay_s(sim, 4.5 * H, shards=1))]
    lost_s = replay.progress_s - 13.5 * H
    assert sim.row()["pls_model"] == pytest.approx(lost_s / (50 * H * 18), rel=1e-12)


# ------------------------------------------------------------------ on the trainer
def test_a_full_log_stays_bit_exact_across_a_lost_persist_and_a_late_commit(monkeypatch):
    """Shard 2 fails during the 18-h persist (replay from the 9-h checkpoint: every step
    since it, across the lost snapshot), shard 5 fails after the retaken checkpoint
    committed (replay from that snapshot's step). Retrained on its own trainer, SWIFT's
    model is the failure-free one bit for bit, so shared it is not trained."""
    second = _persists(CHECKFREQ, SLOW)[1]
    failures = _failing([_mid(second), 25 * H], ["[emb_ps2]", "[emb_ps5]"])
    trainer = (SMALL_TRAINER, "trainer.optimizer.sparse.kind=momentum")
    alone = scenario("prod50h", CHECKFREQ, SLOW, failures, *trainer, "trainer.share_prefix=false")
    sims = [simulate(alone, i, 0) for i in range(2)]
    replays = _events(sims[1], ReplayShards)
    assert [e.key for e in replays] == [9 * H, replays[0].progress_s]  # the retaken one
    reports = record_replays(monkeypatch)
    base, [_, model] = run_models(alone, sims)
    step = [model.step_of(e) for e in replays]
    assert reports == [(step[0], step[0] - 22, 0), (step[1], step[1] - step[0], 0)]
    assert step[0] - 43 >= 4  # the failure is steps after the 18-h snapshot (step 43)
    want, got = base.snapshot(), model.trainer.snapshot()
    for a, b in zip(want.dense + want.dense_state, got.dense + got.dense_state, strict=True):
        assert a.tobytes() == b.tobytes()
    assert want.embeddings.values.tobytes() == got.embeddings.values.tobytes()
    for name, values in want.embeddings.state.items():
        assert values.tobytes() == got.embeddings.state[name].tobytes()
    shared = scenario("prod50h", CHECKFREQ, SLOW, failures, *trainer)
    _, [_, lazy] = run_models(shared, [simulate(shared, i, 0) for i in range(2)])
    assert lazy.trainer is None and lazy.own_steps == 0


def test_a_persist_that_survives_a_trainer_failure_is_the_base_of_a_later_replay():
    """Trainer 3 fails during the 18-h persist (its in-flight step undone, the persist goes
    on and commits); shard 5 fails at 25 h and replays from the 18-h snapshot's step.
    Retrained alone, SWIFT's model is bit for bit the one of the same run without the
    shard's failure: the replay from that base is exact. (Not bit for bit the failure-free
    model: the undo is arithmetic, and whether (w - d) + d rounds back to w depends on the
    gradient d, which the BLAS kernel and its thread count round differently.)"""
    second = _persists(CHECKFREQ, SLOW)[1]
    momentum, alone = "trainer.optimizer.sparse.kind=momentum", "trainer.share_prefix=false"
    states, replays = [], []
    for failures in (
        _failing([_mid(second), 25 * H], ["[trainer3]", "[emb_ps5]"]),
        _failing([_mid(second)], ["[trainer3]"]),
    ):
        s = scenario("prod50h", CHECKFREQ, SLOW, failures, SMALL_TRAINER, momentum, alone)
        sims = [simulate(s, i, 0) for i in range(2)]
        replays.append([e.key for e in _events(sims[1], ReplayShards)])
        _, [_, model] = run_models(s, sims)
        states.append(model_state(model.trainer))
    assert replays == [[18 * H], []]
    for a, b in zip(*states, strict=True):
        assert a.tobytes() == b.tobytes()


def test_recompute_after_a_lost_dense_snapshot_stays_bit_exact():
    """The lost 13.5-h dense snapshot above: back to 4.5 h, the 9-h checkpoint taken again.
    Retrained alone, the model still ends on the failure-free one bit for bit."""
    budget = "policies.1.log_budget=0.5"
    dense = _persists(CHECKFREQ, SLOW, budget)[2]
    s = scenario("prod50h", CHECKFREQ, SLOW, budget, _failing([_mid(dense)], ["[emb_ps2]"]),
                 SMALL_TRAINER, "trainer.share_prefix=false")  # fmt: skip
    sims = [simulate(s, i, 0) for i in range(2)]
    assert [e.key for e in _events(sims[1], RestoreAll)] == [4.5 * H]
    base, [_, model] = run_models(s, sims)
    assert model.own_steps > s.trainer.steps  # the rolled-back steps were trained again
    for a, b in zip(model_state(base), model_state(model.trainer), strict=True):
        assert a.tobytes() == b.tobytes()


def test_drop_counts_the_lookups_after_the_gap_as_lost():
    """b = 0.5, drop, shard 2 fails during the 18-h persist: the measured lost lookups are
    the shard's lookups from the end of the 9-h checkpoint's logged prefix to the failure,
    including the steps logged after the 18-h snapshot (past the gap: not replayable)."""
    drop = ("policies.1.log_budget=0.5", "policies.1.unlogged=drop")
    second = _persists(CHECKFREQ, SLOW, *drop)[1]
    s = scenario("prod50h", CHECKFREQ, SLOW, *drop, _failing([_mid(second)], ["[emb_ps2]"]),
                 SMALL_TRAINER)  # fmt: skip
    sims = [simulate(s, i, 0) for i in range(2)]
    _, [_, model] = run_models(s, sims)
    probe = Trainer(trainer_config(s, 0))
    lookups = np.zeros(s.trainer.steps, dtype=np.int64)

    def count(update):
        on = probe.embeddings.shard_of_global(update.rows) == 2
        lookups[update.step] = update.counts[on].sum()

    probe.add_update_listener(count)
    probe.train(s.trainer.steps)
    [replay] = _events(sims[1], ReplayShards)
    checkpoint, snapshot = 22, 43  # steps of 9 h and 18 h (of 50 h in 120 steps)
    failed = model.step_of(replay)
    assert failed - snapshot >= 4  # steps logged after the snapshot, past the gap
    prefix = round(0.5 * 9 / 50 * 120)
    assert model.lost_lookups == lookups[checkpoint + prefix : failed].sum() > 0


@pytest.mark.parametrize("mode", ["recompute", "drop"])
def test_the_side_adopts_the_snapshot_s_state_when_its_persist_commits(mode):
    """A commit that lands steps after its snapshot (step 5, commit at 19): the replay base
    is the state at the snapshot, and the log keeps the steps since it. A full log then
    replays bit-exactly; a partial one (drop, 11 steps per interval from the snapshot)
    rebuilds the shard as after step 15 and loses steps 16-21, never the state at the
    commit (adopting it would apply steps 5-15 twice, or keep unlogged updates as saved)."""
    drop = ("policies.1.log_budget=0.5", "policies.1.unlogged=drop") if mode == "drop" else ()
    s = scenario("prod50h", CHECKFREQ, SMALL_TRAINER, "failures=[]", *drop)
    cfg = trainer_config(s, 0)
    model = PolicyModel(simulate(s, 1, 0), cfg, s.trainer.steps)
    tr = Trainer(cfg)
    model.follow(tr, own=True)
    rec = StepRecorder(tr, 1)
    tr.train(5)
    model.apply(Snapshot(1.0, key=1.0), tr)
    tr.train(14)
    model.apply(Commit(2.0, key=1.0), tr)
    tr.train(3)
    expect = tr.read_shard(1)
    corrupt_shard(tr, 1)
    model.apply(ReplayShards(3.0, key=1.0, shards=(1,), exact=mode != "drop"), tr)
    got = tr.read_shard(1)
    model.unfollow()
    if mode == "drop":
        assert got.values.tobytes() == rec.after[15].tobytes()
        assert model.lost_lookups == sum(rec.lookups[k] for k in range(16, 22)) > 0
        return
    assert got.values.tobytes() == expect.values.tobytes()
    assert model.lost_lookups == 0
    reference = Trainer(cfg)
    reference.train(22)
    for a, b in zip(model_state(tr), model_state(reference), strict=True):
        assert a.tobytes() == b.tobytes()


# ------------------------------------------------------------------ the log itself
def test_the_log_keeps_what_follows_a_snapshot_until_its_persist_commits():
    """Checkpoint at step 3, snapshot at 7: until the commit a replay starts from step 3
    with every record since; the commit (later, at step 11) moves the base to step 7 and
    keeps the records of steps 7-10. Both replays are bit-exact, as is the end."""
    cfg = small_config(sparse="momentum", dense="momentum", lr=0.05)
    reference = Trainer(cfg)
    reference.train(20)
    tr = Trainer(cfg)
    log = UpdateLog(tr)
    tr.train(3)
    durable = tr.read_shard(1)
    log.checkpoint(1)
    tr.train(4)
    snapshot = tr.read_shard(1)
    log.snapshot(1)
    tr.train(2)
    assert log.replay_steps(1) == log.steps_since_checkpoint(1) == 6
    expect = tr.read_shard(1)
    corrupt_shard(tr, 1)
    tr.write_shard(1, durable)
    assert log.replay(1).replayed_steps == 6
    assert tr.read_shard(1).values.tobytes() == expect.values.tobytes()
    tr.train(2)
    log.checkpoint(1, 7)
    assert log.replay_steps(1) == log.steps_since_checkpoint(1) == 4
    tr.train(3)
    corrupt_shard(tr, 1)
    tr.write_shard(1, snapshot)
    assert log.replay(1).replayed_steps == 7
    tr.train(6)
    for a, b in zip(model_state(tr), model_state(reference), strict=True):
        assert a.tobytes() == b.tobytes()


def test_a_budget_gap_before_a_snapshot_strands_the_records_after_it():
    """Two steps per interval (``budget_steps=2``): steps 0-1 logged, 2-4 not, a snapshot at
    step 5 starts a new interval (5-6 logged, 7 not). A replay from step 0 stops at the gap:
    the shard is as after step 1 and steps 2-7 are lost. Once the snapshot commits, a replay
    from it re-applies 5-6 and loses 7 only."""
    tr = Trainer(small_config(sparse="sgd", lr=0.05))
    log = UpdateLog(tr, budget_steps=2)
    rec = StepRecorder(tr, 0)
    initial = tr.read_shard(0)
    tr.train(5)
    at_snapshot = tr.read_shard(0)
    log.snapshot(0)
    tr.train(3)
    assert log.replay_steps(0) == 2
    tr.write_shard(0, initial)
    report = log.replay(0)
    assert (report.replayed_steps, report.lost_steps) == (2, 6)
    assert report.lost_lookups == sum(rec.lookups[s] for s in range(2, 8))
    assert tr.read_shard(0).values.tobytes() == rec.after[1].tobytes()
    log.checkpoint(0, 5)
    tr.write_shard(0, at_snapshot)
    report = log.replay(0)
    assert (report.replayed_steps, report.lost_steps) == (2, 1)
    assert report.lost_lookups == rec.lookups[7]
    assert tr.read_shard(0).values.tobytes() == rec.after[6].tobytes()


def test_sync_mode_records_whole_checkpoints_only():
    """``save_mode: sync`` (the default) is SWIFT as before: no snapshot, no persist."""
    sim = simulate(scenario("prod50h", SYNC, "policies.1.log_budget=0.3", NO_TRAINER), 1, 0)
    assert not _events(sim, Snapshot) and not _events(sim, Commit) and _events(sim, Checkpoint)
    assert not [p for p in sim.timeline if p.category == "persist"]
