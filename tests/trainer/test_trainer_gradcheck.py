"""Finite-difference gradient checks (float64) of every layer, the interaction, the embeddings."""

import numpy as np
import pytest

from ftsim.trainer import Trainer
from ftsim.trainer.model import DenseDLRM, DotInteraction, bce_with_logits

EPS = 1e-6
RTOL = 1e-6  # max |analytic - numeric| / (|analytic| + |numeric| + 1e-10) over the checked entries


def numeric_grad(f, x: np.ndarray, idx: list[tuple]) -> np.ndarray:
    """Central differences of scalar f() w.r.t. the entries ``idx`` of array ``x`` (in place)."""
    out = []
    for i in idx:
        old = x[i]
        x[i] = old + EPS
        up = f()
        x[i] = old - EPS
        down = f()
        x[i] = old
        out.append((up - down) / (2 * EPS))
    return np.array(out)


def rel_err(a: np.ndarray, n: np.ndarray) -> float:
    return float(np.max(np.abs(a - n) / (np.abs(a) + np.abs(n) + 1e-10)))


def sample_idx(shape: tuple, rng: np.random.Generator, k: int = 12) -> list[tuple]:
    return [tuple(int(rng.integers(s)) for s in shape) for _ in range(k)]


@pytest.fixture
def dlrm():
    rng = np.random.default_rng(3)
    model = DenseDLRM(3, 4, 4, [8, 6, 4], [10, 7, 1], rng, np.float64)
    b = 16
    dense = rng.normal(size=(b, 3))
    emb = rng.normal(0, 0.5, size=(b, 4, 4))
    labels = (rng.random(b) < 0.3).astype(np.float64)

    def loss() -> float:
        model.feature_buffer(b)[:, 1:] = emb
        return bce_with_logits(model.forward(dense), labels)

    model.feature_buffer(b)[:, 1:] = emb
    dfeat = model.backward(model.forward(dense), labels).copy()
    return model, emb, loss, dfeat, rng


def test_every_mlp_layer(dlrm):
    model, _, loss, _, rng = dlrm
    for mlp in (model.bottom, model.top):
        for param, grad in zip(mlp.params, mlp.grads, strict=True):
            analytic = grad.copy()
            idx = sample_idx(param.shape, rng)
            num = numeric_grad(loss, param, idx)
            assert rel_err(np.array([analytic[i] for i in idx]), num) < RTOL


def test_embedding_input_gradient(dlrm):
    _, emb, loss, dfeat, rng = dlrm
    idx = sample_idx(emb.shape, rng, k=20)
    num = numeric_grad(loss, emb, idx)
    assert rel_err(np.array([dfeat[:, 1:][i] for i in idx]), num) < RTOL


@pytest.mark.parametrize("n_out", [None, 4])
def test_interaction_alone(n_out):
    """The interaction's backward through a linear layer: the identity (the interaction's own
    gradient) and a random (d + P, 4) weight like the first top-MLP layer."""
    rng = np.random.default_rng(5)
    inter = DotInteraction(5, 3, np.float64)
    assert inter.out_dim == 3 + 10
    weight = np.eye(inter.out_dim) if n_out is None else rng.normal(size=(inter.out_dim, n_out))
    feat = rng.normal(size=(6, 5, 3))
    upstream = rng.normal(size=(6, weight.shape[1]))

    def f() -> float:
        return float(np.sum((inter.forward(feat) @ weight) * upstream))

    inter.forward(feat)
    analytic = inter.backward(upstream, weight).copy()
    idx = sample_idx(feat.shape, rng, k=25)
    assert rel_err(np.array([analytic[i] for i in idx]), numeric_grad(f, feat, idx)) < RTOL


def test_kaggle_interaction_width():
    inter = DotInteraction(27, 16, np.float32)
    assert inter.n_pairs == 351 and inter.out_dim == 367


def test_embedding_path_through_trainer(make_config):
    """Summed per-row gradients (with repeated rows in the batch) against finite differences
    on the embedding table itself, and the SGD step they produce."""
    cfg = make_config(dtype="float64", batch_size=48, lr=0.05)
    tr = Trainer(cfg)
    batch = tr.data.batch(0)
    emb = tr.embeddings

    def loss() -> float:
        gids = batch.cat + emb.offsets[:-1]
        emb.lookup(gids, out=tr.model.feature_buffer(len(batch))[:, 1:])
        return bce_with_logits(tr.model.forward(batch.dense.astype(np.float64)), batch.label)

    records = []
    tr.add_update_listener(records.append)
    before = emb.weights.copy()
    tr.train_batch(batch)
    rec = records[0]
    assert rec.counts.max() > 1  # the check covers rows looked up several times
    # finite differences at the pre-step parameters: rewind dense and sparse state
    after = emb.weights.copy()
    emb.weights[:] = before
    for p, g in zip(tr.model.params, tr.model.grads, strict=True):
        p += cfg.optimizer.dense.lr * g  # undo the plain SGD dense step
    rng = np.random.default_rng(0)
    picks = rng.choice(len(rec.rows), size=min(15, len(rec.rows)), replace=False)
    idx = [(int(rec.rows[j]), int(rng.integers(emb.dim))) for j in picks]
    num = numeric_grad(loss, emb.weights, idx)
    analytic = np.array([rec.grad[j, k] for j, (_, k) in zip(picks, idx, strict=True)])
    assert rel_err(analytic, num) < RTOL
    np.testing.assert_allclose(rec.new.values, rec.old.values - 0.05 * rec.grad, rtol=1e-12)
    np.testing.assert_array_equal(after[rec.rows], rec.new.values)
    untouched = np.setdiff1d(np.arange(emb.n_rows), rec.rows)
    np.testing.assert_array_equal(after[untouched], before[untouched])
