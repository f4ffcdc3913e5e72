"""Sparse row-wise and dense update rules against straightforward reference formulas."""

import numpy as np
import pytest

from ftsim.trainer.config import DenseOptimizerConfig, SparseOptimizerConfig
from ftsim.trainer.embeddings import SegmentSum, SumPattern
from ftsim.trainer.optim import DenseOptimizer, SparseOptimizer


@pytest.mark.parametrize("kind", ["sgd", "momentum", "rowwise_adagrad"])
def test_sparse_rules_touch_only_given_rows(kind):
    rng = np.random.default_rng(0)
    opt = SparseOptimizer(SparseOptimizerConfig(kind=kind, lr=0.2, momentum=0.8, eps=1e-6))
    w = rng.normal(size=(10, 3)).astype(np.float32)
    state = {k: rng.random(s).astype(np.float32) for k, s in opt.state_shapes(10, 3).items()}
    w0, s0 = w.copy(), {k: v.copy() for k, v in state.items()}
    rows = np.array([1, 4, 7])
    g = rng.normal(size=(3, 3)).astype(np.float32)
    opt.apply(w, state, rows, g.copy())
    if kind == "sgd":
        expect = w0[rows] - 0.2 * g
    elif kind == "momentum":
        v = 0.8 * s0["momentum"][rows] + g
        np.testing.assert_allclose(state["momentum"][rows], v, rtol=1e-6)
        expect = w0[rows] - 0.2 * v
    else:
        a = s0["accum"][rows] + (g**2).mean(axis=1)
        np.testing.assert_allclose(state["accum"][rows], a, rtol=1e-6)
        expect = w0[rows] - 0.2 * g / (np.sqrt(a)[:, None] + 1e-6)
    np.testing.assert_allclose(w[rows], expect, rtol=1e-5)
    other = np.setdiff1d(np.arange(10), rows)
    np.testing.assert_array_equal(w[other], w0[other])
    for k in state:
        np.testing.assert_array_equal(state[k][other], s0[k][other])


def test_state_shapes_are_per_row():
    shapes = {
        k: SparseOptimizer(SparseOptimizerConfig(kind=k)).state_shapes(5, 4)
        for k in ("sgd", "momentum", "rowwise_adagrad")
    }
    assert shapes == {
        "sgd": {},
        "momentum": {"momentum": (5, 4)},
        "rowwise_adagrad": {"accum": (5,)},
    }


@pytest.mark.parametrize("kind", ["sgd", "momentum", "adagrad"])
def test_dense_rules(kind):
    rng = np.random.default_rng(1)
    p = rng.normal(size=(4, 3))
    p0 = p.copy()
    opt = DenseOptimizer(DenseOptimizerConfig(kind=kind, lr=0.1, momentum=0.5, eps=1e-8), [p])
    g1, g2 = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    opt.step([g1])
    opt.step([g2])
    if kind == "sgd":
        expect = p0 - 0.1 * (g1 + g2)
    elif kind == "momentum":
        expect = p0 - 0.1 * g1 - 0.1 * (0.5 * g1 + g2)
    else:
        a1, a2 = g1**2, g1**2 + g2**2
        expect = p0 - 0.1 * g1 / (np.sqrt(a1) + 1e-8) - 0.1 * g2 / (np.sqrt(a2) + 1e-8)
    np.testing.assert_allclose(p, expect, rtol=1e-10)


@pytest.mark.parametrize("n_rows", [40, 20_000])  # unique ids by a count / by a sort
def test_segment_sum_adds_in_lookup_order(n_rows):
    """Sums equal a float32 loop over the lookups in order (bit for bit); a batch's
    SegmentSum serves any number of gradient arrays (every trainer of the batch)."""
    rng = np.random.default_rng(2)
    col_of = np.sort(rng.choice(500, size=300, replace=False))  # strictly increasing
    pattern = SumPattern(col_of, 500)
    for _ in range(3):
        ids = rng.integers(0, 40, size=300) * (n_rows // 40)
        summer = SegmentSum(ids, n_rows, pattern)
        np.testing.assert_array_equal(summer.rows, np.unique(ids))
        np.testing.assert_array_equal(summer.counts, np.bincount(ids)[summer.rows])
        for _ in range(2):
            grads = rng.normal(size=(500, 4)).astype(np.float32)
            sums = summer(grads)
            ref = np.zeros((n_rows, 4), np.float32)
            for k, i in enumerate(ids):
                ref[i] += grads[col_of[k]]
            assert sums.dtype == np.float32 and sums.tobytes() == ref[summer.rows].tobytes()
