"""SWIFT logging for embedding shards: full-log replay is exact; a byte budget loses updates."""

import numpy as np
import pytest

from ftsim.trainer import Trainer
from ftsim.trainer.undo import Undoer
from ftsim.trainer.update_log import RECORD_HEADER_BYTES, ROW_ID_BYTES, UpdateLog


def model_state(tr: Trainer) -> list[np.ndarray]:
    return [*tr.model.params, *tr.dense_optimizer.state, tr.embeddings.weights,
            *tr.embeddings.state.values()]  # fmt: skip


def corrupt_shard(tr: Trainer, shard: int) -> None:
    """The shard's parameter server died: its rows and state are gone."""
    data = tr.read_shard(shard)
    data.values[:] = np.nan
    for a in data.state.values():
        a[:] = np.nan
    tr.write_shard(shard, data)


@pytest.mark.parametrize(
    "sparse, dense, placement",
    [
        ("sgd", "sgd", "row_round_robin"),
        ("momentum", "momentum", "table_wise"),
        ("rowwise_adagrad", "adam", "row_round_robin"),
    ],
)
def test_full_log_replay_equals_failure_free_run(make_config, sparse, dense, placement):
    cfg = make_config(sparse=sparse, dense=dense, placement=placement, lr=0.05)
    reference = Trainer(cfg)
    reference.train(30)

    tr = Trainer(cfg)
    log = UpdateLog(tr)
    tr.train(8)
    shard = 1
    ckpt = tr.read_shard(shard)
    log.checkpoint(shard)
    tr.train(12)
    before_failure = [x.copy() for x in model_state(tr)]
    corrupt_shard(tr, shard)
    tr.write_shard(shard, ckpt)  # reload the checkpoint ...
    report = log.replay(shard)  # ... and replay the log
    assert report.replayed_steps == log.replay_steps(shard) == 12
    assert report.lost_steps == 0 and report.lost_lookups == 0 and len(report.lost_rows) == 0
    for x, y in zip(model_state(tr), before_failure, strict=True):
        assert x.tobytes() == y.tobytes()  # bit for bit
    tr.train(10)
    for x, y in zip(model_state(tr), model_state(reference), strict=True):
        assert x.tobytes() == y.tobytes()  # final model = failure-free model (bit-identical)


def test_replay_from_step_zero_and_repeated_failures(make_config):
    tr = Trainer(make_config(sparse="momentum"))
    log = UpdateLog(tr)
    ckpt = tr.read_shard(0)  # initial rows: the log since step 0 covers everything
    log.checkpoint(0)
    tr.train(5)
    expect = tr.read_shard(0)
    for _ in range(2):  # the log stays valid until the next checkpoint
        corrupt_shard(tr, 0)
        tr.write_shard(0, ckpt)
        log.replay(0)
        got = tr.read_shard(0)
        assert got.values.tobytes() == expect.values.tobytes()
        assert got.state["momentum"].tobytes() == expect.state["momentum"].tobytes()


def test_second_failure_replays_everything_since_the_checkpoint(make_config):
    """A replay keeps the log (the recovered shard is not durable): a second failure after
    more training reloads the same checkpoint and replays every step since it, exactly."""
    cfg = make_config(sparse="momentum", dense="momentum", lr=0.05)
    reference = Trainer(cfg)
    reference.train(20)
    tr = Trainer(cfg)
    log = UpdateLog(tr)
    tr.train(3)
    ckpt = tr.read_shard(1)
    log.checkpoint(1)
    for trained, expect_steps in ((4, 4), (6, 10)):
        tr.train(trained)
        corrupt_shard(tr, 1)
        tr.write_shard(1, ckpt)
        assert log.replay(1).replayed_steps == expect_steps == tr.step - 3
    tr.train(7)
    for x, y in zip(model_state(tr), model_state(reference), strict=True):
        assert x.tobytes() == y.tobytes()


def test_a_budget_reports_every_lost_step_since_the_checkpoint(make_config):
    """With a budget, each replay reports all unlogged steps since the checkpoint: the
    second report extends the first by the steps trained in between."""
    tr = Trainer(make_config(sparse="sgd", lr=0.05))
    log = UpdateLog(tr, budget_steps=2)
    rec = StepRecorder(tr, 0)
    ckpt = tr.read_shard(0)
    reports = []
    for trained in (5, 4):
        tr.train(trained)
        tr.write_shard(0, ckpt)
        reports.append(log.replay(0))
        assert tr.read_shard(0).values.tobytes() == rec.after[1].tobytes()  # the prefix
    assert [r.lost_steps for r in reports] == [3, 7]
    assert reports[1].lost_lookups - reports[0].lost_lookups == sum(
        rec.lookups[s] for s in range(5, 9)
    )


def test_log_follows_undo_and_reexecution(make_config):
    cfg = make_config(sparse="momentum", dense="momentum", lr=0.05)
    tr = Trainer(cfg)
    log = UpdateLog(tr, budget_bytes=10**9)
    undoer = Undoer(tr)  # sparse rows written back exactly
    tr.train(3)
    ckpt = tr.read_shard(0)
    log.checkpoint(0)
    tr.train(5)
    undoer.undo_last_step()  # SWIFT: back to step 7; its record must not be replayed
    assert log.replay_steps(0) == 4 and log.steps_since_checkpoint(0) == 4
    at7 = tr.read_shard(0)
    corrupt_shard(tr, 0)
    tr.write_shard(0, ckpt)
    log.replay(0)
    assert tr.read_shard(0).values.tobytes() == at7.values.tobytes()
    tr.train(2)  # re-execute step 7 (and 8): their records replace the undone one
    assert log.replay_steps(0) == 6
    now = tr.read_shard(0)
    corrupt_shard(tr, 0)
    tr.write_shard(0, ckpt)
    log.replay(0)
    got = tr.read_shard(0)
    assert got.values.tobytes() == now.values.tobytes()
    assert got.state["momentum"].tobytes() == now.state["momentum"].tobytes()
    tr.restore(Trainer(cfg).snapshot())  # back to step 0, before the checkpoint
    with pytest.raises(ValueError, match="past the checkpoint"):
        log.replay(0)


class StepRecorder:
    """Reference bookkeeping: shard contents after every step, lookups per shard and step."""

    def __init__(self, tr: Trainer, shard: int) -> None:
        self.tr, self.shard = tr, shard
        self.after: dict[int, np.ndarray] = {}
        self.lookups: dict[int, int] = {}
        self.rows: dict[int, np.ndarray] = {}
        tr.add_update_listener(self)

    def __call__(self, update) -> None:
        on = self.tr.embeddings.shard_of_global(update.rows) == self.shard
        self.after[update.step] = self.tr.read_shard(self.shard).values
        self.lookups[update.step] = int(update.counts[on].sum())
        self.rows[update.step] = update.rows[on]


@pytest.mark.parametrize("sparse", ["sgd", "momentum", "rowwise_adagrad"])
def test_budget_loses_the_unlogged_suffix(make_config, sparse):
    tr = Trainer(make_config(sparse=sparse, lr=0.05))
    shard, steps = 2, 16
    full = UpdateLog(tr)
    tr.train(3)
    ckpt = tr.read_shard(shard)
    full.checkpoint(shard)
    rec = StepRecorder(tr, shard)
    # budget: roughly the first 6 of the 16 records of a full log
    probe = Trainer(make_config(sparse=sparse, lr=0.05))
    probe_log = UpdateLog(probe)
    probe.train(3)
    probe_log.checkpoint(shard)
    probe.train(6)
    budget = probe_log.nbytes(shard) + 1
    log = UpdateLog(tr, budget_bytes=budget)
    log.checkpoint(shard)
    tr.train(steps)
    failure_free = tr.read_shard(shard)
    assert full.replay_steps(shard) == steps
    assert log.nbytes(shard) <= budget < full.nbytes(shard)
    n_logged = log.replay_steps(shard)
    assert n_logged == 6

    corrupt_shard(tr, shard)
    tr.write_shard(shard, ckpt)
    report = log.replay(shard)
    got = tr.read_shard(shard)
    cutoff = 3 + n_logged  # first unlogged step
    # the shard is exactly as it was at the end of the logged prefix ...
    assert got.values.tobytes() == rec.after[cutoff - 1].tobytes()
    # ... so the updates of steps cutoff .. 3+steps-1 are lost, and only those
    lost = list(range(cutoff, 3 + steps))
    assert report.lost_steps == len(lost)
    assert report.lost_lookups == sum(rec.lookups[s] for s in lost) > 0
    expect_lost = np.unique(np.concatenate([rec.rows[s] for s in lost]))
    np.testing.assert_array_equal(report.lost_rows, expect_lost)
    differ = failure_free.rows[np.any(got.values != failure_free.values, axis=1)]
    np.testing.assert_array_equal(differ, expect_lost)  # the model differs exactly there
    # the other shards were not touched by the recovery
    others = np.setdiff1d(np.arange(tr.embeddings.n_rows), tr.embeddings.shard_rows(shard))
    assert np.isfinite(tr.embeddings.weights[others]).all()


def test_bytes_accounting_and_checkpoint_truncation(make_config):
    tr = Trainer(make_config())
    log = UpdateLog(tr)
    touched: dict[int, list[np.ndarray]] = {s: [] for s in range(tr.n_shards)}

    def record(update):
        shard = tr.embeddings.shard_of_global(update.rows)
        for s in range(tr.n_shards):
            touched[s].append(update.rows[shard == s])

    tr.add_update_listener(record)
    tr.train(7)
    row_bytes = ROW_ID_BYTES + tr.embeddings.dim * 4  # float32 gradients
    for s in range(tr.n_shards):
        assert all(len(r) for r in touched[s])  # every batch touches every shard here
        expect = sum(RECORD_HEADER_BYTES + len(r) * row_bytes for r in touched[s])
        assert log.nbytes(s) == log.written_bytes(s) == expect
        assert log.replay_steps(s) == 7
        assert int(log.spread(s, 1)[0]) == expect
        # k = 3 machines: rows dealt by position in the shard; a header per record and machine
        pos = [np.searchsorted(tr.embeddings.shard_rows(s), r) % 3 for r in touched[s]]
        split = [
            sum(RECORD_HEADER_BYTES + np.sum(p == j) * row_bytes for p in pos if np.any(p == j))
            for j in range(3)
        ]
        np.testing.assert_array_equal(log.spread(s, 3), split)
        assert max(split) < expect <= sum(split)
    log.checkpoint(1)
    assert log.nbytes(1) == 0 and log.replay_steps(1) == 0 and log.steps_since_checkpoint(1) == 0
    assert log.written_bytes(1) > 0 and log.nbytes(0) > 0
    tr.train(2)
    assert log.replay_steps(1) == 2 and log.steps_since_checkpoint(1) == 2
    log.close()
    tr.train(1)
    assert log.replay_steps(1) == 2


def test_zero_budget_logs_nothing(make_config):
    tr = Trainer(make_config())
    log = UpdateLog(tr, budget_bytes=0)
    ckpt = tr.read_shard(0)
    tr.train(4)
    tr.write_shard(0, ckpt)
    report = log.replay(0)
    assert log.nbytes(0) == 0 and report.replayed_steps == 0 and report.lost_steps == 4
    assert report.lost_lookups > 0
    np.testing.assert_array_equal(tr.read_shard(0).values, ckpt.values)
    with pytest.raises(ValueError):
        UpdateLog(tr, budget_bytes=-1)
