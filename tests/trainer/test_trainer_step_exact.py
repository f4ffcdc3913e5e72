"""The restructured training step equals the plain formulas it replaced, bit for bit.

For speed (issue 26) the step was restructured without changing any result: the pairs are
copied out of the Gram matrices row by row, the interaction's symmetric weight is gathered
instead of scattered, a batch's lookup indices are built once for all its trainers, the dense
optimizer runs once over packed buffers, rows are scattered whole, and the power-law sampler
keeps its index arrays. Each part is compared here with a plain reference implementation (the
previous formulas), on small random shapes (hypothesis), for exact equality: both sides run
the same BLAS products on the same operands and differ only in copies, gathers and the
grouping of elementwise operations, which round nothing differently. Exactness is defined
step by step, so comparing after several steps is not a chaotic-trajectory comparison: the
first differing bit would show at the step that made it. Each check is shown to catch a
planted bug (``test_*_catches_*``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ftsim.trainer.data as data_module
import ftsim.trainer.model as model_module
import ftsim.trainer.optim as optim_module
from ftsim.trainer import (
    DenseOptimizerConfig,
    ModelConfig,
    OptimizerConfig,
    ShardingConfig,
    SharedData,
    SparseOptimizerConfig,
    SyntheticData,
    SyntheticDataConfig,
    Trainer,
    TrainerConfig,
)
from ftsim.trainer.data import PowerLawRows
from ftsim.trainer.model import DotInteraction, sigmoid
from ftsim.trainer.optim import DenseOptimizer, pack, put_rows

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def tiny_config(
    batch: int, dim: int, sizes: list[int], hidden: int, dtype: str, seed: int
) -> TrainerConfig:
    """A tiny DLRM with plain SGD on dense and sparse parameters, MFU counters on."""
    return TrainerConfig(
        model=ModelConfig(
            embedding_dim=dim, bottom_mlp=[hidden, dim], top_mlp=[hidden, 1], dtype=dtype, seed=seed
        ),
        data=SyntheticDataConfig(seed=seed + 1, n_dense=3, cardinalities=sizes),
        optimizer=OptimizerConfig(
            dense=DenseOptimizerConfig(kind="sgd", lr=0.2),
            sparse=SparseOptimizerConfig(kind="sgd", lr=0.2),
        ),
        sharding=ShardingConfig(n_shards=2),
        batch_size=batch,
        eval_samples=64,
    )


configs = st.builds(
    tiny_config,
    batch=st.integers(1, 24),
    dim=st.integers(1, 5),
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=6),
    hidden=st.integers(1, 9),
    dtype=st.sampled_from(["float32", "float64"]),
    seed=st.integers(0, 1000),
)


# --------------------------------------------------------- the step, plain formulas
def mlp_forward(mlp, x: np.ndarray) -> list[np.ndarray]:
    """Activations of every layer (``a_l = relu(a_{l-1} @ W_l + b_l)``)."""
    acts = []
    for layer, (w, b) in enumerate(zip(mlp.weights, mlp.biases, strict=True)):
        z = np.matmul(x, w) + b
        x = np.maximum(z, 0) if mlp.relu_last or layer < len(mlp.weights) - 1 else z
        acts.append(x)
    return acts


def mlp_backward(mlp, x: np.ndarray, acts: list[np.ndarray], dz: np.ndarray) -> tuple:
    """Weight and bias gradients, and the gradient of the first pre-activation. ``dz`` is
    masked in place, keeping its layout: the trainer's bottom MLP takes a strided column of
    the interaction gradient, and a product with a strided vector (bottom width 1) may round
    differently in BLAS from one with a contiguous copy."""
    gw, gb = [None] * len(acts), [None] * len(acts)
    for layer in range(len(acts) - 1, -1, -1):
        if mlp.relu_last or layer < len(acts) - 1:
            dz *= acts[layer] > 0
        a_prev = acts[layer - 1] if layer > 0 else x
        gw[layer] = np.matmul(a_prev.T, dz)
        gb[layer] = np.sum(dz, axis=0)
        if layer > 0:
            dz = np.matmul(dz, mlp.weights[layer].T)
    return gw, gb, dz


def reference_step(tr: Trainer, batch) -> tuple[np.ndarray, np.ndarray]:
    """One SGD step of ``tr`` on ``batch`` by the previous formulas: pairs by ``np.take``,
    the symmetric weight by two scatters, segment sums by ``np.add.at`` (in lookup order),
    the optimizers array by array, rows by fancy assignment. Returns the touched rows and
    their summed gradients."""
    m, emb = tr.model, tr.embeddings
    b, dt = len(batch), m.dtype
    n_vectors, d = m.interaction.n_vectors, emb.dim
    gids = batch.cat + emb.offsets[:-1]
    feat = np.empty((b, n_vectors, d), dt)
    feat[:, 1:] = emb.weights[gids]
    dense = batch.dense.astype(dt)
    bottom_acts = mlp_forward(m.bottom, dense)
    feat[:, 0] = bottom_acts[-1]
    gram = np.matmul(feat, np.ascontiguousarray(feat.transpose(0, 2, 1)))
    li, lj = np.tril_indices(n_vectors, -1)
    pairs = np.take(gram.reshape(b, -1), li * n_vectors + lj, axis=1)
    out = np.concatenate([feat[:, 0], pairs], axis=1)
    top_acts = mlp_forward(m.top, out)
    dlogit = np.empty((b, 1), dt)
    dlogit[:, 0] = (sigmoid(top_acts[-1][:, 0].copy()) - batch.label) * dt.type(1.0 / b)
    top_gw, top_gb, dz = mlp_backward(m.top, out, top_acts, dlogit)
    weight = m.top.weights[0]
    wsym = np.zeros((n_vectors**2, weight.shape[1]), dt)
    wsym[li * n_vectors + lj] = weight[d:]
    wsym[lj * n_vectors + li] = weight[d:]
    dsym = np.matmul(dz, wsym.T).reshape(b, n_vectors, n_vectors)
    dfeat = np.matmul(dsym, feat)
    dfeat[:, 0] += dz @ weight[:d].T
    bottom_gw, bottom_gb, _ = mlp_backward(m.bottom, dense, bottom_acts, dfeat[:, 0])
    lr = tr.cfg.optimizer.dense.lr
    grads = [*interleave(bottom_gw, bottom_gb), *interleave(top_gw, top_gb)]
    for p, g in zip(m.params, grads, strict=True):
        p -= g * lr
    ids = gids.reshape(-1)
    rows, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
    sums = np.zeros((len(rows), d), dt)
    np.add.at(sums, inverse, dfeat[:, 1:].reshape(-1, d))
    summed = sums.copy()
    w = emb.weights[rows]
    w -= sums * tr.cfg.optimizer.sparse.lr
    emb.weights[rows] = w
    tr.mfu.counts[rows] += counts
    tr.step += 1
    return rows, summed


def interleave(weights: list, biases: list) -> list:
    return [x for pair in zip(weights, biases, strict=True) for x in pair]


def first_difference(a: Trainer, b: Trainer, sums: tuple[list, list] = ([], [])) -> str | None:
    """Name of the first state array that differs bitwise between two trainers (or of the
    first step whose summed embedding gradients differ), else None."""
    named = [("step", np.array(a.step), np.array(b.step))]
    pairs = enumerate(zip(a.model.params, b.model.params, strict=True))
    named += [(f"dense {i}", x, y) for i, (x, y) in pairs]
    named += [("embeddings", a.embeddings.weights, b.embeddings.weights)]
    named += [("use counts", a.mfu.counts, b.mfu.counts)]
    named += [(f"sums of step {i}", x, y) for i, (x, y) in enumerate(zip(*sums, strict=True))]
    for name, x, y in named:
        if x.shape != y.shape or x.tobytes() != y.tobytes():
            return name
    return None


def trained_both_ways(cfg: TrainerConfig, steps: int = 3) -> tuple:
    """Two trainers from ``cfg``, one stepped by the trainer, one by the reference, and the
    summed embedding gradients of every step of each (rows and sums)."""
    fast, plain = Trainer(cfg), Trainer(cfg)
    fast_sums, plain_sums = [], []
    fast.add_update_listener(lambda u: fast_sums.append(np.concatenate([u.rows, u.grad.ravel()])))
    for i in range(steps):
        fast.train_batch(fast.data.batch(i))
        rows, sums = reference_step(plain, plain.data.batch(i))
        plain_sums.append(np.concatenate([rows, sums.ravel()]))
    return fast, plain, (fast_sums, plain_sums)


@SETTINGS
@given(cfg=configs)
def test_step_equals_the_plain_formulas(cfg):
    assert first_difference(*trained_both_ways(cfg)) is None


@pytest.mark.parametrize("block", [1, 5])
def test_step_in_gram_blocks_equals_the_plain_formulas(small, block, monkeypatch):
    """A batch larger than GRAM_BLOCK (as the held-out set's chunks) goes through the Gram
    matrices block by block: the same step, and the same predictions."""
    monkeypatch.setattr(model_module, "GRAM_BLOCK", block)
    assert first_difference(*trained_both_ways(small)) is None
    blocked = Trainer(small)
    blocked.train(2)
    monkeypatch.setattr(model_module, "GRAM_BLOCK", 10**6)
    whole = Trainer(small)
    whole.train(2)
    assert blocked.predict(whole.eval_set).tobytes() == whole.predict(whole.eval_set).tobytes()


def test_gram_block_check_catches_a_block_written_one_sample_off(small, monkeypatch):
    original = DotInteraction._pairs

    def off_by_one(self, b, start, n):
        return original(self, b, max(0, start - 1), n)

    monkeypatch.setattr(model_module, "GRAM_BLOCK", 5)
    monkeypatch.setattr(DotInteraction, "_pairs", off_by_one)
    assert first_difference(*trained_both_ways(small)) is not None


@pytest.fixture
def small():
    return tiny_config(batch=16, dim=3, sizes=[5, 40, 9, 30], hidden=6, dtype="float32", seed=3)


def test_step_check_catches_a_pair_copied_from_the_wrong_column(small, monkeypatch):
    original = DotInteraction._pairs

    def shifted(self, b, start, n):  # the pairs of row 3 taken one column to the right
        pairs = list(original(self, b, start, n))
        pairs[2] = (pairs[2][0], self.buffers(n)["gram"][:, 3, 1:4])  # (the diagonal)
        return pairs

    monkeypatch.setattr(DotInteraction, "_pairs", shifted)
    assert first_difference(*trained_both_ways(small)) is not None


def test_step_check_catches_rows_gathered_one_slot_early(small, monkeypatch):
    original = Trainer._lookups

    def early(self, batch):  # the placeholder column last: each row lands one slot early
        rows, segment_sum = original(self, batch)
        return np.roll(rows, -1, axis=1), segment_sum

    monkeypatch.setattr(Trainer, "_lookups", early)
    assert first_difference(*trained_both_ways(small)) is not None


def plain_predictions(tr: Trainer, batch) -> np.ndarray:
    """Click probabilities by the plain formulas: the rows gathered by fancy indexing into
    the interaction input's ``[:, 1:]``, the model's forward pass over the whole set."""
    m = tr.model
    dense = batch.dense.astype(m.dtype)
    feat = m.feature_buffer(len(batch))
    feat[:, 1:] = tr.embeddings.weights[batch.cat + tr.embeddings.offsets[:-1]]
    return sigmoid(m.forward(dense).astype(np.float64))


@SETTINGS
@given(cfg=configs)
def test_predictions_equal_the_plain_formulas(cfg):
    tr = Trainer(cfg)
    tr.train(2)
    assert tr.predict(tr.eval_set).tobytes() == plain_predictions(tr, tr.eval_set).tobytes()


def test_prediction_check_catches_rows_gathered_one_table_off(small, monkeypatch):
    from ftsim.trainer.embeddings import ShardedEmbeddings

    original = ShardedEmbeddings.lookup

    def shifted(self, ids, out):  # each sample's rows moved one table to the right
        original(self, np.roll(ids, 1, axis=1), out)

    tr = Trainer(small)
    tr.train(2)
    monkeypatch.setattr(ShardedEmbeddings, "lookup", shifted)
    assert tr.predict(tr.eval_set).tobytes() != plain_predictions(tr, tr.eval_set).tobytes()


def test_step_check_catches_a_symmetric_weight_with_its_diagonal_set(small, monkeypatch):
    original = DotInteraction.__init__

    def keep_diagonal(self, *args):
        original(self, *args)
        self._diagonal = self._diagonal[:0]  # rows (i, i) keep a weight row

    monkeypatch.setattr(DotInteraction, "__init__", keep_diagonal)
    assert first_difference(*trained_both_ways(small)) is not None


def test_step_check_catches_segment_sums_accumulated_in_float64(small, monkeypatch):
    from ftsim.trainer.embeddings import SegmentSum

    def float64_sums(self, grad_rows):  # one rounding at the end instead of one per add
        indptr = self.pattern.indptr
        col_of = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
        sums = np.zeros((len(self.rows), grad_rows.shape[1]))
        np.add.at(sums, self.inverse, grad_rows[col_of].astype(np.float64))
        return sums.astype(grad_rows.dtype)

    monkeypatch.setattr(SegmentSum, "__call__", float64_sums)
    cfg = tiny_config(batch=64, dim=3, sizes=[3, 2], hidden=4, dtype="float32", seed=1)
    assert first_difference(*trained_both_ways(cfg)) == "sums of step 0"  # rows repeat


def test_step_check_catches_a_misaligned_packed_gradient(small, monkeypatch):
    original = DenseOptimizer.step

    def shifted(self, grads, packed_grads=None):
        original(self, grads, None if packed_grads is None else np.roll(packed_grads, 1))

    monkeypatch.setattr(DenseOptimizer, "step", shifted)
    assert first_difference(*trained_both_ways(small)) == "dense 0"


# ----------------------------------------------------------- the parts, one by one
KINDS = ["sgd", "momentum", "adagrad", "adam"]


def packed_and_unpacked(kind: str, shapes: list, seed: int, steps: int = 3):
    """The same optimizer run on packed views and on separate arrays, same gradients."""
    rng = np.random.default_rng(seed)
    params = [rng.normal(size=s).astype(np.float32) for s in shapes]
    flat, views = pack([p.copy() for p in params])
    cfg = DenseOptimizerConfig(kind=kind, lr=0.05)
    separate = DenseOptimizer(cfg, params)
    packed = DenseOptimizer(cfg, views, packed=flat)
    for _ in range(steps):
        grads = [rng.normal(size=s).astype(np.float32) for s in shapes]
        flat_grads, grad_views = pack(grads)
        separate.step(grads)
        packed.step(grad_views, flat_grads)
    return separate, packed


def same_optimizer_state(a: DenseOptimizer, b: DenseOptimizer) -> bool:
    pairs = zip(a.params + a.state, b.params + b.state, strict=True)
    return all(x.tobytes() == y.tobytes() for x, y in pairs)


shape_lists = st.lists(
    st.lists(st.integers(1, 7), min_size=1, max_size=2).map(tuple), min_size=1, max_size=5
)


@SETTINGS
@given(kind=st.sampled_from(KINDS), shapes=shape_lists, seed=st.integers(0, 100))
def test_packed_optimizer_equals_the_per_array_rule(kind, shapes, seed):
    separate, packed = packed_and_unpacked(kind, shapes, seed)
    assert same_optimizer_state(separate, packed)


def test_packed_optimizer_check_catches_state_views_unlinked_from_the_packed_state(monkeypatch):
    def unlinked(arrays):  # the per-parameter state is not a view of what the rule updates
        flat, views = pack(arrays)
        return flat, [v.copy() for v in views]

    monkeypatch.setattr(optim_module, "pack", unlinked)
    separate, packed = packed_and_unpacked("momentum", [(3,), (5, 2)], seed=0)
    assert not same_optimizer_state(separate, packed)


def put_rows_matches_assignment(put, n_rows: int, rows: list, width: int, seed: int) -> bool:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n_rows, width)).astype(np.float32)
    values = rng.normal(size=(len(rows), width)).astype(np.float32)
    expected = a.copy()
    expected[rows] = values
    put(a, np.asarray(rows, dtype=np.int64), values)
    return a.tobytes() == expected.tobytes()


@SETTINGS
@given(
    n_rows=st.integers(1, 20),
    data=st.data(),
    width=st.integers(1, 9),
    seed=st.integers(0, 100),
)
def test_put_rows_equals_fancy_assignment(n_rows, data, width, seed):
    rows = data.draw(st.lists(st.integers(0, n_rows - 1), max_size=30))  # duplicates: last wins
    assert put_rows_matches_assignment(put_rows, n_rows, rows, width, seed)


def test_put_rows_check_catches_first_write_winning():
    def first_wins(a, rows, values):
        put_rows(a, rows[::-1], values[::-1])

    assert not put_rows_matches_assignment(first_wins, 4, [1, 2, 1], 3, seed=0)


def searchsorted_sample(rows: PowerLawRows, u: np.ndarray) -> np.ndarray:
    """The rows drawn by the plain formula: per table, the first rank whose CDF exceeds the
    uniform (the table's CDF and the uniform shifted by the table index, as built)."""
    cat = np.empty(u.shape, np.int64)
    for t in range(u.shape[1]):
        cdf = rows._cdf[rows.offsets[t] : rows.offsets[t + 1]]
        pos = np.minimum(np.searchsorted(cdf, u[:, t] + t, side="right"), len(cdf) - 1)
        cat[:, t] = rows._row_of_pos[rows.offsets[t] + pos]
    return cat


def sample_matches_searchsorted(rows: PowerLawRows, sizes: list, u: np.ndarray) -> bool:
    """Each draw is the one :func:`searchsorted_sample` gives."""
    assert len(sizes) == u.shape[1]
    return np.array_equal(rows.sample(u), searchsorted_sample(rows, u))


@SETTINGS
@given(
    sizes=st.lists(st.integers(1, 300), min_size=1, max_size=5),
    exponent=st.floats(0.0, 2.5),
    n=st.integers(1, 50),
    seed=st.integers(0, 100),
    guide_entries=st.sampled_from([1, 400, data_module.GUIDE_ENTRIES]),  # 1 to 4 per row
)
def test_power_law_sample_equals_searchsorted(sizes, exponent, n, seed, guide_entries):
    rng = np.random.default_rng(seed)
    default, data_module.GUIDE_ENTRIES = data_module.GUIDE_ENTRIES, guide_entries
    try:
        rows = PowerLawRows(sizes, [exponent] * len(sizes), rng)
    finally:
        data_module.GUIDE_ENTRIES = default
    u = rng.random((n, len(sizes)))
    u[0] = 0.0
    u[-1] = np.nextafter(1.0, 0.0)  # t + u may round up to t + 1
    assert sample_matches_searchsorted(rows, sizes, u)
    assert sample_matches_searchsorted(rows, sizes, rng.random((n, len(sizes))))


def test_sample_check_catches_a_walk_that_stops_short():
    sizes = [200, 300]
    rows = PowerLawRows(sizes, [0.3, 0.3], np.random.default_rng(0))
    u = np.random.default_rng(1).random((200, 2))
    u[0] = np.nextafter(1.0, 0.0)  # the last rank of each table
    rows._last = rows._last - 1  # the walk never reaches the last rank
    assert not sample_matches_searchsorted(rows, sizes, u)


def plain_batch(data: SyntheticData, rng: np.random.Generator, n: int) -> tuple:
    """A batch by the previous formulas, alone: dense features, row uniforms sampled
    (searchsorted per table), the teacher's probability with one product for the batch,
    then label uniforms; returns (dense, cat, label, prob)."""
    dense = rng.standard_normal((n, data.n_dense), dtype=np.float32)
    cat = searchsorted_sample(data.rows, rng.random((n, len(data.table_sizes))))
    teacher = data.teacher
    g = cat + teacher.offsets[:-1]
    v = np.take(teacher.vectors, g, axis=0)
    total = np.einsum("btk->bk", v)
    pairs = 0.5 * (np.einsum("bk,bk->b", total, total) - np.einsum("btk,btk->b", v, v))
    raw = dense @ teacher.w_dense + np.take(teacher.first, g).sum(axis=1) + pairs
    prob = 1.0 / (1.0 + np.exp(-(raw + teacher.bias)))
    label = (rng.random(n) < prob).astype(np.float32)
    return dense, cat, label, prob


def same_batches(data: SyntheticData, start: int, stop: int) -> bool:
    """``data.batches(start, stop)`` (generated together) equal the plain formulas, each
    batch alone, bit for bit."""
    made = data.batches(start, stop)
    for index, batch in zip(range(start, stop), made, strict=True):
        rng = np.random.default_rng([data.cfg.seed, 1, index])
        expected = plain_batch(data, rng, data.batch_size)
        got = (batch.dense, batch.cat, batch.label, batch.prob)
        pairs = zip(got, expected, strict=True)
        if any(x.dtype != y.dtype or x.tobytes() != y.tobytes() for x, y in pairs):
            return False
    return True


@SETTINGS
@given(
    sizes=st.lists(st.integers(1, 80), min_size=1, max_size=5),
    batch=st.integers(1, 20),
    teacher_dim=st.integers(1, 5),
    start=st.integers(0, 50),
    count=st.integers(1, 9),
)
def test_batches_made_together_equal_each_made_alone(sizes, batch, teacher_dim, start, count):
    cfg = SyntheticDataConfig(seed=start, n_dense=3, cardinalities=sizes, teacher_dim=teacher_dim)
    assert same_batches(SyntheticData(cfg, batch), start, start + count)


def test_batches_made_together_at_prod50h_shapes():
    """26 tables of 1000 rows, teacher of dimension 4, 256 samples, in groups as the
    co-simulation makes them (a shared source's aligned group, cut at ``until``), and the
    held-out set, one group of its own."""
    data = SyntheticData(SyntheticDataConfig(seed=7, row_cap=1000), 256)
    assert same_batches(data, 30, 30 + 9)
    shared = SharedData(data, until=40)
    assert shared.batch(33) is shared.batch(33) and sorted(shared._batches) == [*range(32, 40)]
    assert all(shared.batch(i).cat.tobytes() == data.batch(i).cat.tobytes() for i in (32, 39))
    held_out = data.eval_set(600)
    got = (held_out.dense, held_out.cat, held_out.label, held_out.prob)
    expected = plain_batch(data, np.random.default_rng([7, 2]), 600)
    assert all(x.tobytes() == y.tobytes() for x, y in zip(got, expected, strict=True))


def test_batch_check_catches_label_uniforms_drawn_before_the_rows(monkeypatch):
    data = SyntheticData(SyntheticDataConfig(seed=2, cardinalities=[30, 9]), 8)

    def labels_first(self, rngs, n):  # the stream consumed in another order
        for rng in rngs:
            rng.random(n)
        return [original(self, [rng], n)[0] for rng in rngs]

    original = SyntheticData._make
    monkeypatch.setattr(SyntheticData, "_make", labels_first)
    assert not same_batches(data, 0, 3)


# ------------------------------------------------------------------ shared data
def test_clone_continues_exactly_like_the_original(small):
    """A clone shares the data and the work arrays: trained and evaluated in turns with
    its original (each call overwriting the other's work arrays), each equals a trainer
    trained alone."""
    tr = Trainer(small)
    tr.train(4)
    twin = tr.clone()
    assert twin.data is tr.data and twin.mfu.counts.tobytes() == tr.mfu.counts.tobytes()
    assert twin.model.workspace is tr.model.workspace
    for _ in range(3):
        tr.train(1)
        twin.evaluate()
        twin.train(1)
        tr.evaluate()
    alone = Trainer(small)
    alone.train(7)
    assert first_difference(tr, twin) is None and first_difference(tr, alone) is None
    assert tr.evaluate() == twin.evaluate() == alone.evaluate()


def test_trainers_sharing_data_train_as_if_alone(small):
    """A float32 and a float64 trainer share one data source (batches, held-out set, and
    the lookup indices derived from a batch); each equals its twin with its own data."""
    f64 = small.model_copy(update={"model": small.model.model_copy(update={"dtype": "float64"})})
    shared = SharedData(SyntheticData(small.data, small.batch_size))
    a, b = Trainer(small, shared), Trainer(f64, shared)
    for _ in range(3):
        a.train(2)
        b.train(1)
    b.train(3)
    alone_a, alone_b = Trainer(small), Trainer(f64)
    alone_a.train(6)
    alone_b.train(6)
    assert first_difference(a, alone_a) is None and first_difference(b, alone_b) is None
    assert a.eval_set is b.eval_set and shared.batch(2) is shared.batch(2)
    assert a.evaluate() == alone_a.evaluate()


def test_a_listener_cannot_change_what_the_trainers_of_a_batch_share(small):
    """The rows and counts an update hands to listeners are the batch's shared lookup
    indices: writing into them (which would corrupt every other trainer of the batch) fails."""
    tr = Trainer(small)

    def sorts_in_place(update):
        update.counts.sort()

    tr.add_update_listener(sorts_in_place)
    with pytest.raises(ValueError, match="read-only"):
        tr.train(1)
