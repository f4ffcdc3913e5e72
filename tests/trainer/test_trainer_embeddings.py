"""Sharded embedding state: placement, per-shard read/write, update records, MFU and SSU."""

import numpy as np
import pytest

from ftsim.trainer import Trainer, UseCounter, UseSampler
from ftsim.trainer.config import ShardingConfig, SparseOptimizerConfig
from ftsim.trainer.embeddings import ShardedEmbeddings

SIZES = [7, 30, 100, 3, 250]


def make_emb(placement: str, kind: str = "momentum") -> ShardedEmbeddings:
    return ShardedEmbeddings(
        SIZES,
        4,
        ShardingConfig(n_shards=3, placement=placement),
        SparseOptimizerConfig(kind=kind),
        np.random.default_rng(0),
    )


@pytest.mark.parametrize("placement", ["row_round_robin", "table_wise"])
def test_shards_partition_all_rows(placement):
    emb = make_emb(placement)
    rows = [emb.shard_rows(s) for s in range(3)]
    np.testing.assert_array_equal(np.sort(np.concatenate(rows)), np.arange(emb.n_rows))
    for s, r in enumerate(rows):
        assert np.all(emb.shard_of_global(r) == s)
        assert emb.shard_n_rows(s) == len(r)
        assert emb.shard_bytes(s) == len(r) * (4 + 4) * 4  # values + momentum, float32
    for t, n in enumerate(SIZES):
        local = np.arange(n)
        np.testing.assert_array_equal(
            emb.shard_of(t, local), emb.shard_of_global(emb.offsets[t] + local)
        )


def test_placements():
    rr = make_emb("row_round_robin")
    np.testing.assert_array_equal(rr.shard_of(0, np.arange(4)), [0, 1, 2, 0])
    np.testing.assert_array_equal(rr.shard_of(1, np.arange(2)), [1, 2])  # table 1 starts at 7
    tw = make_emb("table_wise")
    # largest first onto the least loaded shard: 250->0, 100->1, 30->2, 7->2, 3->2
    np.testing.assert_array_equal(tw.table_shard, [2, 2, 1, 2, 0])
    assert tw.shard_n_rows(0) == 250


def test_row_bytes_per_optimizer():
    assert make_emb("table_wise", "sgd").row_bytes == 16
    assert make_emb("table_wise", "rowwise_adagrad").row_bytes == 20
    assert make_emb("table_wise", "momentum").row_bytes == 32


def test_shard_read_write_roundtrip_and_partial_restore():
    emb = make_emb("row_round_robin")
    emb.state["momentum"][:] = np.random.default_rng(1).normal(size=emb.state["momentum"].shape)
    snap = emb.read_shard(1)
    assert snap.nbytes == emb.shard_bytes(1)
    before = emb.snapshot()
    emb.weights += 1.0
    emb.state["momentum"] *= 2.0
    emb.write_shard(1, snap)
    on1 = emb.shard_rows(1)
    np.testing.assert_array_equal(emb.weights[on1], before.values[on1])
    np.testing.assert_array_equal(emb.state["momentum"][on1], before.state["momentum"][on1])
    on0 = emb.shard_rows(0)
    np.testing.assert_array_equal(emb.weights[on0], before.values[on0] + 1.0)
    # partial: only some rows of shard 0 from the full snapshot
    part = before.subset(on0[:5])
    emb.write_rows(part)
    np.testing.assert_array_equal(emb.weights[on0[:5]], before.values[on0[:5]])
    np.testing.assert_array_equal(emb.weights[on0[5:]], before.values[on0[5:]] + 1.0)
    with pytest.raises(ValueError):
        emb.write_shard(0, snap)
    with pytest.raises(KeyError):
        snap.subset(on0[:1])
    emb.restore(before)
    np.testing.assert_array_equal(emb.weights, before.values)


def test_update_record(make_config):
    tr = Trainer(make_config(sparse="momentum"))
    got = []
    tr.add_update_listener(got.append)
    batch = tr.data.batch(0)
    before = tr.embeddings.snapshot()
    tr.train(1)
    rec = got[0]
    assert rec.step == 0 and tr.step == 1
    gids = batch.cat + tr.embeddings.offsets[:-1]
    np.testing.assert_array_equal(rec.rows, np.unique(gids))
    np.testing.assert_array_equal(rec.counts, np.bincount(gids.ravel())[rec.rows])
    np.testing.assert_array_equal(tr.embeddings.weights[rec.rows], rec.new.values)
    np.testing.assert_array_equal(
        tr.embeddings.state["momentum"][rec.rows], rec.new.state["momentum"]
    )
    assert rec.counts.sum() == batch.cat.size
    per_table = rec.by_table()
    for t, (local, counts) in enumerate(per_table):
        np.testing.assert_array_equal(local, np.unique(batch.cat[:, t]))
        assert counts.sum() == len(batch)
    np.testing.assert_array_equal(
        rec.tables(), np.repeat(np.arange(5), [len(x) for x, _ in per_table])
    )
    per_shard = rec.by_shard(tr.embeddings)
    assert sum(len(r) for r, _ in per_shard) == len(rec.rows)
    for s, (rows, counts) in enumerate(per_shard):
        assert np.all(tr.embeddings.shard_of_global(rows) == s) and counts.sum() >= len(rows)
    # undo: writing the old rows back restores the pre-step embedding state exactly
    tr.write_rows(rec.old)
    np.testing.assert_array_equal(tr.embeddings.weights, before.values)
    np.testing.assert_array_equal(tr.embeddings.state["momentum"], before.state["momentum"])
    tr.remove_update_listener(got.append)
    tr.train(1)
    assert len(got) == 1


def test_use_counter_top_rows():
    c = UseCounter(10)
    c.add(np.array([1, 3, 5]), np.array([5, 9, 5]))
    c.add(np.array([3, 8]), np.array([1, 2]))
    np.testing.assert_array_equal(c.top_rows(0.2), [1, 3])  # 10 (row 3), then tie 5: lower id
    np.testing.assert_array_equal(c.top_rows(1.0), [1, 3, 5, 8])  # only used rows
    np.testing.assert_array_equal(c.top_rows(0.5, among=np.array([5, 6, 8])), [5, 8])
    c.reset(np.array([3]))
    np.testing.assert_array_equal(c.top_rows(0.1), [1])
    c.reset()
    assert c.top_rows(1.0).size == 0


def test_use_sampler_bounded_and_deterministic():
    rows = np.arange(1000)
    counts = np.ones(1000, dtype=np.int64)
    a, b = UseSampler(0.1, 50, seed=3), UseSampler(0.1, 50, seed=3)
    a.observe(7, rows, counts)
    b.observe(7, rows, counts)
    np.testing.assert_array_equal(a.peek(), b.peek())
    assert 0 < len(a.peek()) <= 50
    a.observe(8, rows, counts)
    assert len(a.drain()) <= 50 and a.peek().size == 0
    hot = UseSampler(0.1, 10_000, seed=0)
    for step in range(50):
        hot.observe(step, np.array([0, 1]), np.array([100, 1]))
    kept = hot.drain()
    assert 0 in kept  # a row looked up 100 times per batch is nearly always sampled


def test_trainer_hooks_fed(make_config):
    tr = Trainer(make_config())
    tr.train(3)
    total = sum(len(tr.data.batch(i)) for i in range(3)) * 5
    assert tr.mfu.counts.sum() == total
