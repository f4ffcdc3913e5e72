"""SWIFT undo: the inverse of one optimizer step (property tests) and the trainer Undoer.

Error model (see docs/swift.md): with unit roundoff u (2**-24 in float32), undoing
``x = b*x_old + a`` costs |x' - x_old| <= u * (3|x_old| + |x|/b) per element, and
undoing ``w -= s`` costs <= u * (2|w| + |s|). The float32 strategies keep these ratios
in realistic ranges so the bound stays below 1e-6 relative: element magnitudes within a
factor 2 of their array's scale, decays >= 0.5 (the division by the decay amplifies the
error by at most 2), gradient / state scale ratios <= 1 (Adam: 2, with v >= m**2 / 2) and
update / weight ratios <= 4: the bound is then <= 8u. The float64 tests use much wider
ranges (decays down to 0.01, ratios up to 100).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ftsim.trainer import Trainer
from ftsim.trainer.config import DenseOptimizerConfig, SparseOptimizerConfig
from ftsim.trainer.optim import DenseOptimizer
from ftsim.trainer.undo import (
    Undoer,
    adam_step,
    adam_undo,
    momentum_step,
    momentum_undo,
    sgd_step,
    sgd_undo,
    sparse_step,
    sparse_undo,
    undo_dense_step,
)

REL = 1e-6


def log_uniform(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.floats(np.log10(lo), np.log10(hi)).map(lambda e: float(10.0**e))


@st.composite
def patterns(draw, n_arrays: int) -> list[np.ndarray]:
    """``n_arrays`` arrays of one shape, magnitudes in [0.5, 1], random signs."""
    shape = draw(st.sampled_from([(1,), (7,), (3, 5)]))
    out = []
    for _ in range(n_arrays):
        e = draw(arrays(np.float64, shape, elements=st.floats(-1, 1)))
        out.append(np.where(e < 0, -1.0, 1.0) * (0.5 + 0.5 * np.abs(e)))
    return out


def rel_err(a, b) -> float:
    """Largest element-wise relative error (every element of ``b`` is non-zero)."""
    return float(np.max(np.abs(np.asarray(a, np.float64) - b) / np.abs(b)))


DTYPES = {
    np.float32: dict(decay=(0.5, 0.999), grad_ratio=(1e-3, 1.0), upd_ratio=(1e-3, 1.0)),
    np.float64: dict(decay=(0.01, 0.9999), grad_ratio=(1e-3, 100.0), upd_ratio=(1e-3, 100.0)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@settings(max_examples=100, deadline=None)
@given(p=patterns(2), lr=log_uniform(1e-4, 1.0), scale=log_uniform(1e-3, 1e3), data=st.data())
def test_sgd_undo_inverts_step(dtype, p, lr, scale, data):
    r = data.draw(log_uniform(*DTYPES[dtype]["upd_ratio"]))
    g = (p[0] * scale).astype(dtype)
    w = (p[1] * lr * scale / r).astype(dtype)  # |lr g| / |w| <= 2 r
    back = sgd_undo(sgd_step(w, g, lr), g, lr)
    assert back.dtype == dtype
    assert rel_err(back, w) <= REL


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@settings(max_examples=100, deadline=None)
@given(p=patterns(3), lr=log_uniform(1e-4, 1.0), scale=log_uniform(1e-3, 1e3), data=st.data())
def test_momentum_undo_inverts_step(dtype, p, lr, scale, data):
    rng = DTYPES[dtype]
    mu = data.draw(st.floats(*rng["decay"]))
    rho = data.draw(log_uniform(*rng["grad_ratio"]))
    r = data.draw(log_uniform(*rng["upd_ratio"]))
    v = (p[0] * scale).astype(dtype)
    g = (p[1] * scale * rho).astype(dtype)
    w = (p[2] * lr * scale / r).astype(dtype)
    w1, v1 = momentum_step(w, v, g, lr, mu)
    w0, v0 = momentum_undo(w1, v1, g, lr, mu)
    assert rel_err(w0, w) <= REL
    assert rel_err(v0, v) <= REL


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@settings(max_examples=120, deadline=None)
@given(p=patterns(4), scale=log_uniform(1e-3, 1e3), t=st.integers(0, 10_000), data=st.data())
def test_adam_undo_inverts_step(dtype, p, scale, t, data):
    rng = DTYPES[dtype]
    b1 = data.draw(st.floats(*rng["decay"]))
    b2 = data.draw(st.floats(0.9, 0.9999) if dtype == np.float32 else st.floats(0.01, 0.99999))
    lr = data.draw(log_uniform(1e-5, 1e-1))
    eps = data.draw(st.sampled_from([1e-8, 1e-6]))
    rho = data.draw(log_uniform(1e-2, 2.0) if dtype == np.float32 else log_uniform(1e-3, 100))
    q = data.draw(st.floats(1.0, 4.0) if dtype == np.float32 else log_uniform(1e-2, 100))
    r = data.draw(log_uniform(*rng["upd_ratio"]))
    m = (p[0] * scale).astype(dtype)
    v = (np.abs(p[1]) * q * scale**2).astype(dtype)  # v >= m**2 / 4 / q-ish
    g = (p[2] * scale * rho).astype(dtype)
    hyper = dict(lr=lr, b1=b1, b2=b2, eps=eps)
    step = -adam_step(np.zeros_like(m), m, v, t, g, **hyper)[0]  # the update, w-independent
    w_scale = np.max(np.abs(step)) / r or scale  # the update can cancel to exactly 0
    w = (p[3] * w_scale).astype(dtype)  # |update| / |w| <= 2 r
    w1, m1, v1, t1 = adam_step(w, m, v, t, g, **hyper)
    assert t1 == t + 1
    w0, m0, v0, t0 = adam_undo(w1, m1, v1, t1, g, **hyper)
    assert t0 == t
    assert rel_err(w0, w) <= REL
    assert rel_err(m0, m) <= REL
    assert rel_err(v0, v) <= REL


def test_adam_undo_of_first_step_from_zero_state_is_exact():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(6, 3)).astype(np.float32)
    z = np.zeros_like(w)
    g = rng.normal(size=w.shape).astype(np.float32)
    w0, m0, v0, t0 = adam_undo(*adam_step(w, z, z, 0, g, 1e-3, 0.9, 0.999, 1e-8)[:4], g,
                               1e-3, 0.9, 0.999, 1e-8)  # fmt: skip
    assert t0 == 0 and not m0.any() and not v0.any() and np.array_equal(w0, w)


def test_adam_matches_reference_formula():
    rng = np.random.default_rng(1)
    p = rng.normal(size=(4, 3))
    p0 = p.copy()
    cfg = DenseOptimizerConfig(kind="adam", lr=0.01, beta1=0.8, beta2=0.99, eps=1e-6)
    opt = DenseOptimizer(cfg, [p])
    m = v = np.zeros_like(p)
    for t in (1, 2, 3):
        g = rng.normal(size=p.shape)
        opt.step([g])
        m = 0.8 * m + 0.2 * g
        v = 0.99 * v + 0.01 * g**2
        p0 = p0 - 0.01 * (m / (1 - 0.8**t)) / (np.sqrt(v / (1 - 0.99**t)) + 1e-6)
    np.testing.assert_allclose(p, p0, rtol=1e-12)
    np.testing.assert_allclose(opt.adam_state(0)[1], v, rtol=1e-12)
    assert int(opt.state[-1]) == 3


def test_zero_decay_buffer_is_dead_state():
    rng = np.random.default_rng(2)
    w, v, g = (rng.normal(size=5) for _ in range(3))
    w1, v1 = momentum_step(w, v, g, 0.1, 0.0)
    w0, v0 = momentum_undo(w1, v1, g, 0.1, 0.0)
    np.testing.assert_allclose(w0, w, rtol=1e-15)
    assert not v0.any()  # unrecoverable, and irrelevant: the next step multiplies it by 0
    g2 = rng.normal(size=5)
    np.testing.assert_array_equal(
        momentum_step(w0, v0, g2, 0.1, 0.0)[0], momentum_step(w, v, g2, 0.1, 0.0)[0]
    )


@pytest.mark.parametrize("kind", ["sgd", "momentum"])
def test_sparse_arithmetic_undo(kind):
    rng = np.random.default_rng(3)
    cfg = SparseOptimizerConfig(kind=kind, lr=0.05, momentum=0.9)
    w = rng.normal(size=(20, 4)).astype(np.float32)
    state = {"momentum": rng.normal(size=(20, 4)).astype(np.float32)} if kind != "sgd" else {}
    rows = np.array([0, 3, 4, 11, 19])
    g = (0.3 * rng.normal(size=(5, 4))).astype(np.float32)
    w1, s1 = sparse_step(cfg, w, state, rows, g)
    w0, s0 = sparse_undo(cfg, w1, s1, rows, g)
    np.testing.assert_allclose(w0, w, rtol=REL)
    for k in state:
        np.testing.assert_allclose(s0[k], state[k], rtol=REL, atol=REL)
    with pytest.raises(ValueError, match="rowwise_adagrad"):
        sparse_undo(SparseOptimizerConfig(kind="rowwise_adagrad"), w1, {}, rows, g)


def test_adagrad_undo_refused():
    opt = DenseOptimizer(DenseOptimizerConfig(kind="adagrad"), [np.ones(3)])
    with pytest.raises(ValueError, match="adagrad"):
        undo_dense_step(opt, [np.ones(3)])


# ------------------------------------------------------------------------------- Undoer
def dense_state(tr: Trainer) -> list[np.ndarray]:
    return [*tr.model.params, *tr.dense_optimizer.state]


def norm_rel(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max |b| (array-wise relative error; 0 when both are zero)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    den = np.max(np.abs(b)) if b.size else 0.0
    return float(np.max(np.abs(a - b)) / den) if den else float(np.max(np.abs(a - b), initial=0))


@pytest.mark.parametrize(
    "dense, sparse, mode",
    [
        ("sgd", "sgd", "rows"),
        ("momentum", "momentum", "rows"),
        ("adam", "rowwise_adagrad", "rows"),
        ("adam", "momentum", "arithmetic"),
        ("momentum", "sgd", "arithmetic"),
    ],
)
def test_undoer_returns_to_previous_step(make_config, dense, sparse, mode):
    cfg = make_config(dense=dense, sparse=sparse, lr=0.05)
    k = 6
    tr = Trainer(cfg)
    undoer = Undoer(tr, sparse=mode)
    tr.train(k - 1)
    loss_k = tr.train(1)
    assert undoer.can_undo and undoer.nbytes > 0
    ref = Trainer(cfg)
    ref.train(k - 1)
    undoer.undo_last_step()
    assert tr.step == k - 1 and not undoer.can_undo
    for x, y in zip(dense_state(tr), dense_state(ref), strict=True):
        assert norm_rel(x, y) <= REL
    emb, emb_ref = tr.embeddings, ref.embeddings
    if mode == "rows":  # pre-step rows written back: exact
        assert emb.weights.tobytes() == emb_ref.weights.tobytes()
        for name in emb.state:
            assert emb.state[name].tobytes() == emb_ref.state[name].tobytes()
    else:
        assert norm_rel(emb.weights, emb_ref.weights) <= REL
        for name in emb.state:
            assert norm_rel(emb.state[name], emb_ref.state[name]) <= REL
    np.testing.assert_array_equal(tr.mfu.counts, ref.mfu.counts)
    with pytest.raises(RuntimeError):
        undoer.undo_last_step()
    # redo: the same batch again, from the undone state. Its loss (a forward pass, Lipschitz
    # in the parameters) matches; the parameters after the step are not compared: a ReLU
    # input within the undo error of 0 would flip a sample's gradient
    assert abs(tr.train(1) - loss_k) <= REL * loss_k
    assert tr.step == k
    undoer.close()


def test_undoer_refuses_dense_adagrad_and_arithmetic_rowwise(make_config):
    with pytest.raises(ValueError, match="adagrad"):
        Undoer(Trainer(make_config(dense="adagrad")))
    with pytest.raises(ValueError, match="rowwise_adagrad"):
        Undoer(Trainer(make_config(sparse="rowwise_adagrad")), sparse="arithmetic")


def test_adam_trainer_snapshot_replays_bit_for_bit(make_config):
    tr = Trainer(make_config(dense="adam", lr=0.01))
    tr.train(4)
    snap = tr.snapshot()
    tr.train(5)
    ref = [x.copy() for x in dense_state(tr)]
    tr.restore(snap)
    assert int(tr.dense_optimizer.state[-1]) == 4
    tr.train(5)
    for x, y in zip(dense_state(tr), ref, strict=True):
        assert x.tobytes() == y.tobytes()
