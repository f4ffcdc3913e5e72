"""Trainer: determinism, snapshot/restore replay, per-shard recovery, learnability."""

import time

import numpy as np
import pytest

from ftsim.trainer import (
    DenseOptimizerConfig,
    ModelConfig,
    OptimizerConfig,
    ShardingConfig,
    SparseOptimizerConfig,
    SyntheticDataConfig,
    Trainer,
    TrainerConfig,
)
from ftsim.trainer.metrics import binary_entropy, log_loss


def state_of(tr: Trainer) -> list[np.ndarray]:
    return [*tr.model.params, *tr.dense_optimizer.state, tr.embeddings.weights,
            *tr.embeddings.state.values()]  # fmt: skip


def assert_same_state(a: Trainer, b: Trainer) -> None:
    assert a.step == b.step
    for x, y in zip(state_of(a), state_of(b), strict=True):
        assert x.tobytes() == y.tobytes()


@pytest.mark.parametrize(
    "sparse, dense", [("sgd", "sgd"), ("momentum", "momentum"), ("rowwise_adagrad", "adagrad")]
)
def test_same_seed_bit_identical(make_config, sparse, dense):
    a = Trainer(make_config(sparse=sparse, dense=dense))
    b = Trainer(make_config(sparse=sparse, dense=dense))
    a.train(25)
    b.train(10)
    b.train(15)
    assert_same_state(a, b)
    c = Trainer(make_config(sparse=sparse, dense=dense, seed=1))
    c.train(25)
    assert a.embeddings.weights.tobytes() != c.embeddings.weights.tobytes()


@pytest.mark.parametrize("sparse", ["momentum", "rowwise_adagrad"])
def test_snapshot_restore_replays_bit_for_bit(make_config, sparse):
    tr = Trainer(make_config(sparse=sparse, dense="momentum"))
    tr.train(7)
    snap = tr.snapshot()
    assert snap.step == 7 and snap.nbytes > tr.embeddings.weights.nbytes
    tr.train(9)
    reference = [x.copy() for x in state_of(tr)]
    tr.restore(snap)
    assert tr.step == 7
    tr.train(9)
    for x, y in zip(state_of(tr), reference, strict=True):
        assert x.tobytes() == y.tobytes()
    other = Trainer(make_config(sparse=sparse, dense="momentum"))
    other.restore(snap)  # into a fresh trainer
    other.train(9)
    assert_same_state(tr, other)


def test_shard_snapshot_restore_and_partial(make_config):
    tr = Trainer(make_config(sparse="momentum", placement="table_wise"))
    tr.train(5)
    shard_snaps = [tr.snapshot_shard(s) for s in range(tr.n_shards)]
    assert sum(s.nbytes for s in shard_snaps) == sum(tr.shard_bytes(s) for s in range(3))
    at5 = tr.embeddings.snapshot()
    tr.train(5)
    at10 = tr.embeddings.snapshot()
    tr.restore_shard(1, shard_snaps[1])  # CPR partial recovery of shard 1 only
    on1 = tr.embeddings.shard_rows(1)
    rest = np.setdiff1d(np.arange(tr.embeddings.n_rows), on1)
    np.testing.assert_array_equal(tr.embeddings.weights[on1], at5.values[on1])
    np.testing.assert_array_equal(tr.embeddings.weights[rest], at10.values[rest])
    np.testing.assert_array_equal(tr.read_shard(1).state["momentum"], at5.state["momentum"][on1])
    # prioritized partial restore: only the most used rows of shard 2
    top = tr.mfu.top_rows(0.1, among=tr.embeddings.shard_rows(2))
    tr.write_rows(at10.subset(top))
    np.testing.assert_array_equal(tr.embeddings.weights[top], at10.values[top])
    assert set(tr.shard_of(4, np.arange(3))) == {int(tr.embeddings.table_shard[4])}


def test_float64_mode_runs(make_config):
    tr = Trainer(make_config(dtype="float64"))
    tr.train(3)
    assert tr.embeddings.weights.dtype == np.float64 and tr.model.params[0].dtype == np.float64


LEARN_CFG = TrainerConfig(
    model=ModelConfig(embedding_dim=8, bottom_mlp=[32, 8], top_mlp=[32, 1]),
    data=SyntheticDataConfig(seed=1, n_dense=4, cardinalities=[10, 50, 100, 200, 500, 1000]),
    optimizer=OptimizerConfig(
        dense=DenseOptimizerConfig(lr=0.3), sparse=SparseOptimizerConfig(lr=0.3)
    ),
    sharding=ShardingConfig(n_shards=4),
    batch_size=256,
    eval_samples=8192,
)
LEARN_STEPS = 1500
MARGIN_VS_CONSTANT = 0.05  # nats below the constant predictor (binary entropy of the rate)
MAX_GAP_TO_TEACHER = 0.07  # nats above the teacher's own log loss


def test_student_learns_the_teacher():
    tr = Trainer(LEARN_CFG)
    ev = tr.eval_set
    constant = binary_entropy(float(ev.label.mean()))
    teacher = log_loss(ev.label, ev.prob)
    t0 = time.perf_counter()
    tr.train(LEARN_STEPS)
    elapsed = time.perf_counter() - t0
    m = tr.evaluate()
    print(f"constant {constant:.4f} teacher {teacher:.4f} student {m} in {elapsed:.1f}s")
    assert m["logloss"] < constant - MARGIN_VS_CONSTANT
    assert m["logloss"] < teacher + MAX_GAP_TO_TEACHER
    assert m["auc"] > 0.72


def uses_match_updates(cfg, steps: int = 3) -> bool:
    """A use listener hears, after every step, the step, rows and counts an update listener
    hears; the values it does not ask for are not recorded (no update listener: the step
    copies no rows)."""
    heard_updates, heard_uses = [], []
    recorder = Trainer(cfg)
    recorder.add_update_listener(lambda u: heard_updates.append((u.step, u.rows, u.counts)))
    recorder.train(steps)
    user = Trainer(cfg)
    user.add_use_listener(lambda step, rows, counts: heard_uses.append((step, rows, counts)))
    reads = []
    original = user.embeddings.read_rows_sorted
    user.embeddings.read_rows_sorted = lambda rows: reads.append(rows) or original(rows)
    user.train(steps)
    if reads or len(heard_uses) != len(heard_updates):
        return False
    for (s1, r1, c1), (s2, r2, c2) in zip(heard_updates, heard_uses, strict=True):
        if s1 != s2 or not np.array_equal(r1, r2) or not np.array_equal(c1, c2):
            return False
    return True


def test_use_listener_hears_the_rows_an_update_listener_hears(make_config):
    assert uses_match_updates(make_config())


def test_use_check_catches_the_step_after(make_config, monkeypatch):
    original = Trainer.add_use_listener

    def late(self, fn):  # hears the step count after the step, not the step's index
        original(self, lambda step, rows, counts: fn(step + 1, rows, counts))

    monkeypatch.setattr(Trainer, "add_use_listener", late)
    assert not uses_match_updates(make_config())


def test_use_check_catches_a_recorded_step(make_config, monkeypatch):
    original = Trainer.add_use_listener

    def recording(self, fn):  # the use listener registered as an update listener too
        original(self, fn)
        self.add_update_listener(lambda update: None)

    monkeypatch.setattr(Trainer, "add_use_listener", recording)
    assert not uses_match_updates(make_config())
