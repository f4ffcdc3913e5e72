"""ECRM parity: layout, overhead, incremental consistency, exact decoding, failure detection."""

import functools
import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftsim.trainer import ShardedEmbeddings, ShardingConfig, SparseOptimizerConfig, Trainer, parity
from ftsim.trainer.parity import ParityCode, UnrecoverableError

OPTIMIZERS = ["sgd", "momentum", "rowwise_adagrad"]
TOL = 1e-5  # relative, float32 storage


def make_trainer(make_config, kind: str, n_shards: int, seed: int = 0) -> Trainer:
    cfg = make_config(sparse=kind, dense="momentum", seed=seed)
    return Trainer(cfg.model_copy(update={"sharding": ShardingConfig(n_shards=n_shards)}))


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want| (inf-norm over the whole array)."""
    return float(np.abs(got - want).max() / np.abs(want).max())


def lose(tr: Trainer, code: ParityCode, shards) -> None:
    """Simulate the loss of ``shards``: their rows, state and parity rows become NaN."""
    emb = tr.embeddings
    for s in shards:
        rows = emb.shard_rows(s)
        emb.weights[rows] = np.nan
        for a in emb.state.values():
            a[rows] = np.nan
        stripes, slot = code.parity_slots(s)
        code.values[stripes, slot] = np.nan
        for a in code.state.values():
            a[stripes, slot] = np.nan


def assert_rows_close(got, want) -> None:
    np.testing.assert_array_equal(got.rows, want.rows)
    assert rel_err(got.values, want.values) <= TOL
    assert got.state.keys() == want.state.keys()
    for name in want.state:
        assert rel_err(got.state[name], want.state[name]) <= TOL


# ---------------------------------------------------------------------------- layout
@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 12),
    r=st.integers(1, 2),
    data=st.data(),
)
def test_layout_distinct_shards_and_balanced_parity(n, r, data):
    if r >= n:
        r = 1
    k = data.draw(st.integers(1, n - r))
    n_rows = data.draw(st.integers(1, 400))
    emb = ShardedEmbeddings(
        [n_rows], 2, ShardingConfig(n_shards=n), SparseOptimizerConfig(), np.random.default_rng(0)
    )
    code = ParityCode(emb, k, r)
    assert code.n_stripes == math.ceil(n_rows / k)
    stripes = np.arange(code.n_stripes)
    rows, present = code.stripe_rows(stripes)
    np.testing.assert_array_equal(rows[present], np.arange(n_rows))
    np.testing.assert_array_equal(code.stripe_of(rows[present]), np.repeat(stripes, k)[:n_rows])
    np.testing.assert_array_equal(code.offset_of(rows[present]), np.arange(n_rows) % k)
    members = np.concatenate([rows % n, code.parity_shards(stripes)], axis=1)  # (stripes, k + r)
    assert all(len(set(m)) == k + r for m in members.tolist())  # k + r distinct shards
    held = np.bincount(code.parity_shards(stripes).ravel(), minlength=n)
    assert held.max() - held.min() <= r  # within one stripe's worth of parity (+-1 for r = 1)
    g = math.gcd(n, k)
    cycle = (n // g) * g // math.gcd(g, r)
    full = np.bincount(code.parity_shards(np.arange(3 * cycle)).ravel(), minlength=n)
    assert np.all(full == full[0])  # exact balance over whole rotation cycles


def test_layout_example():
    emb = ShardedEmbeddings(
        [8], 2, ShardingConfig(n_shards=3), SparseOptimizerConfig(), np.random.default_rng(0)
    )
    code = ParityCode(emb, 2)
    # stripe j = rows 2j, 2j+1 on shards 2j % 3, (2j+1) % 3; parity on the third shard
    np.testing.assert_array_equal(code.parity_shards(np.arange(4)).ravel(), [2, 1, 0, 2])
    stripes, slot = code.parity_slots(2)
    np.testing.assert_array_equal(stripes, [0, 3])
    np.testing.assert_array_equal(slot, [0, 0])
    assert [list(x) for x in code.ranges(1, 2)] == [[1, 4], [7]]


@settings(max_examples=60, deadline=None)
@given(groups=st.integers(1, 4), r=st.integers(1, 2), data=st.data())
def test_grouped_layout_stripes_stay_inside_one_group(groups, r, data):
    k = data.draw(st.integers(1, 4))
    size = data.draw(st.integers(k + r, k + r + 2))
    n = groups * size
    n_rows = data.draw(st.integers(1, 300))
    emb = ShardedEmbeddings(
        [n_rows], 2, ShardingConfig(n_shards=n), SparseOptimizerConfig(), np.random.default_rng(0)
    )
    code = ParityCode(emb, k, r, layout="grouped", group_size=size)
    stripes = np.arange(code.n_stripes)
    rows, present = code.stripe_rows(stripes)
    assert present.any(axis=1).all()  # no empty stripe is counted
    np.testing.assert_array_equal(np.sort(rows[present]), np.arange(n_rows))
    np.testing.assert_array_equal(code.stripe_of(rows[present]), np.nonzero(present)[0])
    np.testing.assert_array_equal(code.offset_of(rows[present]), np.nonzero(present)[1])
    members = np.concatenate([rows % n, code.parity_shards(stripes)], axis=1)
    assert all(len(set(m)) == k + r for m in members.tolist())
    assert np.all(members // size == members[:, :1] // size)  # one group per stripe
    full = np.bincount(code.parity_shards(np.arange(2 * n)).ravel(), minlength=n)
    np.testing.assert_array_equal(full, 2 * r)  # r parity rows per shard and block


def test_grouped_layout_example():
    emb = ShardedEmbeddings(
        [14], 2, ShardingConfig(n_shards=6), SparseOptimizerConfig(), np.random.default_rng(0)
    )
    code = ParityCode(emb, 2, 1, layout="grouped")  # groups {0, 1, 2} and {3, 4, 5}
    # stripe t of group q: local row 0 of position t and local row 1 of position t + 1
    rows, present = code.stripe_rows(np.arange(code.n_stripes))
    assert rows[:7].tolist() == [[0, 7], [1, 8], [2, 6], [3, 10], [4, 11], [5, 9], [12, 19]]
    assert code.parity_shards(np.arange(7)).ravel().tolist() == [2, 0, 1, 5, 3, 4, 2]
    assert code.n_stripes == 8 and present[6:].tolist() == [[True, False], [True, False]]
    with pytest.raises(ValueError, match="multiple of group_size"):
        ParityCode(emb, 3, 1, layout="grouped")


@pytest.mark.parametrize("kind", OPTIMIZERS)
def test_grouped_parity_consistent_after_many_steps(make_config, kind):
    tr = make_trainer(make_config, kind, 6)
    code = ParityCode.attach(tr, 2, 1, layout="grouped")
    tr.train(300)
    assert max(code.consistency_error().values()) <= TOL


@pytest.mark.parametrize("kind", OPTIMIZERS)
@pytest.mark.parametrize(
    "n_rows, k, r", [(12, 3, 1), (12, 4, 2), (12, 2, 2), (13, 3, 1), (13, 4, 2)]
)
def test_memory_overhead(kind, n_rows, k, r):
    emb = ShardedEmbeddings(
        [n_rows], 4, ShardingConfig(n_shards=6), SparseOptimizerConfig(kind=kind),
        np.random.default_rng(0),
    )  # fmt: skip
    code = ParityCode(emb, k, r)
    data_bytes = n_rows * emb.row_bytes
    assert code.parity_bytes_total == math.ceil(n_rows / k) * r * emb.row_bytes
    if n_rows % k == 0:
        assert code.memory_overhead == r / k
    else:  # the short last stripe still has r full parity rows
        assert code.memory_overhead == r * math.ceil(n_rows / k) / n_rows > r / k
    assert code.parity_bytes_per_shard.sum() == code.parity_bytes_total
    assert code.parity_bytes_total / data_bytes == code.memory_overhead


def test_refusals():
    def emb(placement="row_round_robin", kind="sgd", n_shards=4):
        return ShardedEmbeddings(
            [10, 20], 2, ShardingConfig(n_shards=n_shards, placement=placement),
            SparseOptimizerConfig(kind=kind), np.random.default_rng(0),
        )  # fmt: skip

    with pytest.raises(ValueError, match="row_round_robin"):
        ParityCode(emb("table_wise"), 2)
    with pytest.raises(ValueError, match="k \\+ r"):
        ParityCode(emb(), 3, 2)
    with pytest.raises(ValueError, match="r in"):
        ParityCode(emb(n_shards=8), 3, 3)
    for kind in ("momentum", "rowwise_adagrad"):
        with pytest.raises(ValueError, match="exact only for sgd"):
            ParityCode(emb(kind=kind), 2, mode="gradient")
    with pytest.raises(ValueError, match="unknown mode"):
        ParityCode(emb(), 2, mode="xor")


# ---------------------------------------------------------------- consistency
@pytest.mark.parametrize("kind", OPTIMIZERS)
def test_parity_consistent_after_many_steps(make_config, kind):
    tr = make_trainer(make_config, kind, 5)
    tr.train(3)  # encode a state that already has optimizer state
    code = ParityCode.attach(tr, 3, 2)
    assert max(code.consistency_error().values()) < 1e-7  # fresh encoding: rounding only
    steps = 500
    tr.train(steps)
    errors = code.consistency_error()
    assert errors.keys() == {"values", *tr.embeddings.state}
    # each fold rounds the parity once (<= 2**-24 relative): the drift is a sum of roundings,
    # about sqrt(steps) * 2**-24 (1e-6 to 5e-6 measured over 8 seeds), steps * 2**-24 at worst
    # (3e-5); a missed or wrong update is off by lr * gradient, orders of magnitude more
    assert max(errors.values()) <= steps * 2.0**-24
    code.rebuild_parity()  # scrubbing resets the drift
    assert max(code.consistency_error().values()) < 1e-7


def test_gradient_mode_matches_delta_mode_for_sgd(make_config):
    tr = make_trainer(make_config, "sgd", 4)
    delta = ParityCode.attach(tr, 2, 2)
    grad = ParityCode.attach(tr, 2, 2, mode="gradient")
    seen = []
    tr.add_update_listener(seen.append)
    tr.train(200)
    assert rel_err(grad.values, delta.values) <= TOL
    assert max(grad.consistency_error().values()) <= TOL
    update = seen[-1]
    n_stripes = len(np.unique(update.rows // 2))
    assert delta.traffic_bytes(update) == len(update.rows) * 16 * 2  # dim 4, float32, r = 2
    assert grad.traffic_bytes(update) == n_stripes * 2 * 16


# ---------------------------------------------------------------------- decoding
@functools.cache
def trained(
    make_config, kind: str, n_shards: int, k: int, r: int, layout="rotating", group=None
) -> tuple[Trainer, ParityCode]:
    """A trainer with parity after 120 steps, shared by the examples of one layout."""
    tr = make_trainer(make_config, kind, n_shards, seed=1)
    code = ParityCode.attach(tr, k, r, layout=layout, group_size=group)
    tr.train(120)
    return tr, code


CODES = [(3, 2, 1), (5, 4, 1), (5, 3, 2), (6, 3, 2)]
GROUPED = [(6, 2, 1, "grouped", 3), (8, 2, 2, "grouped", 4), (6, 3, 2, "grouped", 6)]


class restoring:
    """Context: put back the rows, state and parity of ``code`` as they were on entry."""

    def __init__(self, tr: Trainer, code: ParityCode) -> None:
        self.emb, self.code = tr.embeddings, code

    def __enter__(self):
        self.rows = self.emb.snapshot()
        self.parity = (self.code.values.copy(), {n: a.copy() for n, a in self.code.state.items()})
        return self.rows

    def __exit__(self, *exc):
        self.emb.restore(self.rows)
        self.code.values[:] = self.parity[0]
        for name, a in self.code.state.items():
            a[:] = self.parity[1][name]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    kind=st.sampled_from(OPTIMIZERS),
    layout=st.sampled_from(CODES + GROUPED),
    data=st.data(),
)
def test_decode_exact_for_any_tolerated_failure(make_config, kind, layout, data):
    n_shards, k, r = layout[:3]
    tr, code = trained(make_config, kind, *layout)  # restored after each example
    failed = data.draw(st.lists(st.integers(0, n_shards - 1), min_size=1, max_size=r, unique=True))
    with restoring(tr, code) as before:
        truth = before.subset(np.concatenate([tr.embeddings.shard_rows(s) for s in failed]))
        lose(tr, code, failed)
        assert len(code.unrecoverable_stripes(failed)) == 0
        assert_rows_close(code.decode(failed), truth)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(layout=st.sampled_from(CODES + GROUPED), data=st.data())
def test_decodable_exactly_when_no_stripe_lost_more_than_r(make_config, layout, data):
    """Any failed set, both layouts: the code decodes a row iff its stripe lost at most r
    members (brute force over every stripe), and the decoded rows are the lost ones."""
    n_shards, k, r = layout[:3]
    tr, code = trained(make_config, "momentum", *layout)
    failed = data.draw(st.sets(st.integers(0, n_shards - 1), min_size=1, max_size=n_shards - 1))
    stripes = np.arange(code.n_stripes)
    rows, present = code.stripe_rows(stripes)
    members = np.concatenate(
        [np.where(present, rows % n_shards, -1), code.parity_shards(stripes)], 1
    )
    bad = np.isin(members, list(failed)).sum(axis=1) > r
    on_failed = present & np.isin(rows % n_shards, list(failed))
    np.testing.assert_array_equal(code.unrecoverable_stripes(list(failed)), np.flatnonzero(bad))
    with restoring(tr, code) as before:
        lose(tr, code, failed)
        decoded, unrecoverable = code.decode_recoverable(list(failed))
        np.testing.assert_array_equal(unrecoverable, np.sort(rows[bad[:, None] & on_failed]))
        np.testing.assert_array_equal(decoded.rows, np.sort(rows[~bad[:, None] & on_failed]))
        if len(decoded.rows):  # (with r = 1 and N = 3, two failures leave nothing decodable)
            assert_rows_close(decoded, before.subset(decoded.rows))
        if bad.any():
            with pytest.raises(UnrecoverableError) as info:
                code.decode(list(failed))
            np.testing.assert_array_equal(info.value.rows, unrecoverable)
        else:
            assert_rows_close(code.decode(list(failed)), decoded)


@pytest.mark.parametrize("kind", OPTIMIZERS)
def test_decode_every_pattern_and_rebuild_parity(make_config, kind, monkeypatch):
    monkeypatch.setattr(parity, "_BLOCK", 7)  # many blocks: exercises the block seams
    tr = make_trainer(make_config, kind, 5)
    code = ParityCode.attach(tr, 3, 2)
    tr.train(150)
    reference = tr.embeddings.snapshot()
    for failed in itertools.chain(
        itertools.combinations(range(5), 1), itertools.combinations(range(5), 2)
    ):
        lose(tr, code, failed)
        decoded = code.decode(failed)
        assert_rows_close(decoded, reference.subset(decoded.rows))
        tr.write_rows(decoded)
        code.rebuild_parity(failed)
        assert max(code.consistency_error().values()) <= TOL


def test_unrecoverable_detected(make_config):
    tr = make_trainer(make_config, "momentum", 6)
    code = ParityCode.attach(tr, 3, 2)
    tr.train(20)
    assert len(code.unrecoverable_stripes([0, 4])) == 0
    failed = [0, 2, 5]
    rows, present = code.stripe_rows(np.arange(code.n_stripes))
    members = np.concatenate(
        [np.where(present, rows % 6, -1), code.parity_shards(np.arange(code.n_stripes))], axis=1
    )
    brute = np.flatnonzero(np.isin(members, failed).sum(axis=1) > 2)
    bad = code.unrecoverable_stripes(failed)
    np.testing.assert_array_equal(bad, brute)
    assert 0 < len(bad) < code.n_stripes  # some stripes avoid one of the three shards
    with pytest.raises(UnrecoverableError) as info:
        code.decode(failed)
    np.testing.assert_array_equal(info.value.stripes, bad)
    lost = rows[bad][present[bad] & np.isin(rows[bad] % 6, failed)]
    np.testing.assert_array_equal(info.value.rows, np.sort(lost))
    with pytest.raises(UnrecoverableError):  # r = 1: any two shards share a stripe
        ParityCode(tr.embeddings, 4, 1).decode([1, 3])


def test_degraded_reads_and_range_rebuild(make_config):
    tr = make_trainer(make_config, "rowwise_adagrad", 4)
    code = ParityCode.attach(tr, 3)
    tr.train(80)
    reference = tr.embeddings.snapshot()
    lose(tr, code, [2])
    for part in code.ranges(2, 4):
        asked = np.concatenate([part, [0, 1, 5]])  # lost rows and rows of surviving shards
        read = code.degraded_read(asked, [2])
        assert_rows_close(read, reference.subset(asked))
        tr.write_rows(read.subset(part))  # rebuild this range
    assert rel_err(tr.embeddings.weights, reference.values) <= TOL
    code.rebuild_parity([2])
    assert max(code.consistency_error().values()) <= TOL


def test_rebuild_read_bytes(make_config):
    tr = make_trainer(make_config, "sgd", 3)  # 390 rows, row = 16 bytes
    code = ParityCode(tr.embeddings, 2)
    # shard 0 holds 130 data rows, each in its own full stripe (1 survivor + 1 parity read)
    # and parity of 65 stripes (2 data rows read each)
    assert code.rebuild_read_bytes(0, include_parity=False) == 130 * 2 * 16
    assert code.rebuild_read_bytes(0) == (130 * 2 + 65 * 2) * 16
    assert code.parity_bytes_per_shard.tolist() == [65 * 16] * 3


def recovered(make_config, kind: str, failed: list[int]) -> tuple[Trainer, ParityCode]:
    """150 steps with (5, 3, 2) parity, then ``failed`` lost, decoded, written back, re-coded."""
    tr = make_trainer(make_config, kind, 5)
    code = ParityCode.attach(tr, 3, 2)
    tr.train(150)
    lose(tr, code, failed)
    tr.write_rows(code.decode(failed))
    code.rebuild_parity(failed)
    return tr, code


def dense_bytes(tr: Trainer) -> list[bytes]:
    """Dense parameters and their optimizer state, as bytes (for exact comparison)."""
    return [a.tobytes() for a in [*tr.model.params, *tr.dense_optimizer.state]]


def state_bytes(tr: Trainer) -> list[bytes]:
    """Every parameter and optimizer-state array of ``tr``, as bytes."""
    emb = [tr.embeddings.weights, *tr.embeddings.state.values()]
    return dense_bytes(tr) + [a.tobytes() for a in emb]


# Held-out log loss (nats) after training on from a recovered state vs from the failure-free
# state. The parameters themselves are not compared after further training: a ReLU input
# within rounding of 0 for one sample flips that sample's gradient, so a 1e-6 decode error
# (or perturbing one value by 1e-6 without any parity) can move rows by 5e-2 within 50
# row-wise Adagrad steps. The loss is stable: that divergence changed it by at most 1.4e-4
# (3 seeds x 8 random 1e-6 perturbations of every row), while losing the two shards without
# recovery raises it by 6e-3 (Adagrad) and 8e-3 (momentum).
LOSS_TOL = 1e-3


@pytest.mark.parametrize("kind", OPTIMIZERS)
def test_training_after_recovery_matches_failure_free(make_config, kind):
    failed = [1, 3]
    clean = make_trainer(make_config, kind, 5)
    clean.train(150)
    tr, code = recovered(make_config, kind, failed)
    emb = tr.embeddings
    lost = np.concatenate([emb.shard_rows(s) for s in failed])
    kept = np.setdiff1d(np.arange(emb.n_rows), lost)
    truth, now = clean.embeddings.snapshot(), emb.snapshot()
    # right after recovery: decoded rows as accurate as decoding; the rest never changed
    # (parity is a listener: it does not alter training, so both runs agree bit for bit)
    assert_rows_close(now.subset(lost), truth.subset(lost))
    survivors, want = now.subset(kept), truth.subset(kept)
    assert survivors.values.tobytes() == want.values.tobytes()
    for name in want.state:
        assert survivors.state[name].tobytes() == want.state[name].tobytes()
    assert dense_bytes(tr) == dense_bytes(clean)
    assert max(code.consistency_error().values()) <= TOL
    # recovery is reproducible: the same failure recovered again trains on bit-identically
    again, _ = recovered(make_config, kind, failed)
    tr.train(50)
    again.train(50)
    assert state_bytes(tr) == state_bytes(again)
    # training goes on as well as without the failure
    clean.train(50)
    assert abs(tr.evaluate()["logloss"] - clean.evaluate()["logloss"]) <= LOSS_TOL
    assert max(code.consistency_error().values()) <= TOL


# ------------------------------------------------------- the update, bit for bit
def plain_update_parity(code: ParityCode, update) -> dict[str, np.ndarray]:
    """The parity after ``update`` by the previous formulas: stripes by np.unique, a dense
    (n, k, w) member array, one matrix product per stripe (copies of the arrays)."""
    rows = update.rows
    touched, index = np.unique(code.stripe_of(rows), return_inverse=True)
    changes = {parity.VALUES: update.new.values.astype(np.float64) - update.old.values}
    for name in code.state:
        new = update.new.state[name].reshape(len(rows), -1).astype(np.float64)
        changes[name] = new - update.old.state[name].reshape(len(rows), -1)
    out = {}
    for name, (_, par) in code._coded_arrays().items():
        par = par.copy()
        members = np.zeros((len(touched), code.k, changes[name].shape[1]))
        members[index, code.offset_of(rows)] = changes[name]
        par[touched] = par[touched] + np.matmul(code.coeffs, members)
        out[name] = par
    return out


def same_parity_updates(make_config, kind: str, k: int, r: int, layout: str) -> bool:
    """Four training steps folded into the parity as the code does and by the plain
    formulas, from the same parity each time (some rows and parity values set to ±0 and to
    values whose sums round), bit for bit."""
    tr = make_trainer(make_config, kind, n_shards=6)
    emb = tr.embeddings
    emb.weights[::7] = -0.0
    emb.weights[1::7] = 3e-8
    code = ParityCode(emb, k, r, layout=layout)
    code.values[::3] = -0.0
    updates = []
    tr.add_update_listener(updates.append)
    for _ in range(4):
        tr.train(1)
        expected = plain_update_parity(code, updates[-1])
        code.on_update(updates[-1])
        for name, (_, par) in code._coded_arrays().items():
            if par.tobytes() != expected[name].tobytes():
                return False
    return True


@pytest.mark.parametrize("kind", OPTIMIZERS)
@pytest.mark.parametrize(("k", "r", "layout"), [(1, 1, "rotating"), (2, 1, "rotating"),
    (2, 2, "rotating"), (2, 1, "grouped"), (3, 2, "rotating")])  # fmt: skip
def test_parity_update_equals_the_per_stripe_product(make_config, kind, k, r, layout):
    assert same_parity_updates(make_config, kind, k, r, layout)


def encode_matches_matmul(code: ParityCode, seed: int) -> bool:
    """``_encode`` of member rows (random, pairs of -0, sums that round, absent members)
    equals NumPy's per-stripe product ``coeffs @ members``, bit for bit."""
    rng = np.random.default_rng(seed)
    n, w = 40, 3
    stripe = np.repeat(np.arange(n), code.k)
    offset = np.tile(np.arange(code.k), n)
    keep = rng.random(len(stripe)) < 0.7  # some members absent (zero)
    delta = rng.normal(size=(len(stripe), w)) * 10.0 ** rng.integers(-20, 3, size=(len(stripe), 1))
    delta[: 4 * code.k] = -0.0  # whole stripes of -0
    stripe, offset, delta = stripe[keep], offset[keep], delta[keep]
    members = np.zeros((n, code.k, w))
    members[stripe, offset] = delta
    expected = np.matmul(code.coeffs, members)
    return code._encode(stripe, offset, n, delta).tobytes() == expected.tobytes()


@pytest.mark.parametrize(("k", "r"), [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (4, 2)])
def test_encoded_members_equal_the_per_stripe_product(k, r):
    emb = ShardedEmbeddings([50], 3, ShardingConfig(n_shards=k + r), SparseOptimizerConfig(),
                            np.random.default_rng(0))  # fmt: skip
    code = ParityCode(emb, k, r)
    assert all(encode_matches_matmul(code, seed) for seed in range(5))


def test_encode_check_catches_a_negative_zero_kept(monkeypatch):
    original = ParityCode._encode

    def without_the_added_zero(self, stripe, offset, n, delta):
        out = original(self, stripe, offset, n, delta)
        out[out == 0] = -0.0  # as a sum of -0 rows without BLAS's zeroed output
        return out

    emb = ShardedEmbeddings([50], 3, ShardingConfig(n_shards=3), SparseOptimizerConfig(),
                            np.random.default_rng(0))  # fmt: skip
    monkeypatch.setattr(ParityCode, "_encode", without_the_added_zero)
    assert not encode_matches_matmul(ParityCode(emb, 2, 1), 0)
