"""SWIFT undo: the exact inverse of one optimizer step (Zhong et al., PPoPP 2023).

On a failure, data-parallel workers that already applied iteration ``k`` undo it so that all
replicas agree on iteration ``k - 1``. SGD, SGD with momentum and Adam are invertible given
the gradient of the step and the *post-step* state:

* ``sgd``:      ``w += lr * g``
* ``momentum``: ``w += lr * v;  v = (v - g) / mu``
* ``adam``:     ``w += lr * m_hat / (sqrt(v_hat) + eps)`` (bias-corrected from the post-step
  ``m``, ``v``, ``t``: the very step that was applied), then ``m = (m - (1-b1) g) / b1``,
  ``v = max(0, (v - (1-b2) g**2) / b2)``, ``t -= 1``

The inverse repeats the step's own float operations in reverse (same products, same Adam
direction via :func:`ftsim.trainer.optim.adam_direction`), so it is exact in real arithmetic
and within a few roundings in floating point; ``docs/swift.md`` derives the error bound. A
decay of 0 (``mu``, ``b1`` or ``b2``) makes the old buffer dead state (the step multiplies it
by 0, so no later value depends on it): it cannot be recovered and is returned as 0.
Adagrad (dense) and row-wise Adagrad (sparse) have no arithmetic inverse here (SWIFT covers
SGD-momentum and Adam); embedding rows of any sparse optimizer can be undone exactly by
writing back the rows' pre-step values from the update record (:class:`Undoer`).

Array arguments are parameter-shaped (any shape, float32 or float64); ``g`` is the step's
gradient, ``lr`` the learning rate. The pure functions return new arrays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np

from ftsim.trainer.config import DenseOptimizerConfig, SparseOptimizerConfig
from ftsim.trainer.embeddings import SparseUpdate
from ftsim.trainer.optim import DenseOptimizer, SparseOptimizer, adam_direction

if TYPE_CHECKING:
    from ftsim.trainer.trainer import Trainer

DENSE_UNDOABLE = ("sgd", "momentum", "adam")
SPARSE_UNDOABLE = ("sgd", "momentum")


def _unmix(x: np.ndarray, decay: float, added: np.ndarray) -> None:
    """Invert ``x = decay * x_old + added`` in place (``x_old`` is dead state when decay=0)."""
    if decay == 0.0:
        x[...] = 0
    else:
        x -= added
        x /= decay


def undo_dense_step(opt: DenseOptimizer, grads: list[np.ndarray]) -> None:
    """Undo ``opt.step(grads)`` in place: parameters and optimizer state before that step.

    ``grads`` must be the gradients of the last step (same order as ``opt.params``).
    Raises ``ValueError`` for ``adagrad`` and when an Adam optimizer has taken no step.
    """
    c = opt.cfg
    if c.kind not in DENSE_UNDOABLE:
        raise ValueError(
            f"no arithmetic undo for dense {c.kind!r}: only {DENSE_UNDOABLE} (SWIFT's scope)"
        )
    t = int(opt.state[-1]) if c.kind == "adam" else 0
    if c.kind == "adam" and t < 1:
        raise ValueError("Adam optimizer has taken no step to undo")
    for i, (p, g) in enumerate(zip(opt.params, grads, strict=True)):
        tmp = np.empty_like(p)
        if c.kind == "sgd":
            np.multiply(g, c.lr, out=tmp)
            p += tmp
        elif c.kind == "momentum":
            v = opt.state[i]
            np.multiply(v, c.lr, out=tmp)
            p += tmp
            _unmix(v, c.momentum, g)
        else:
            m, v = opt.adam_state(i)
            p += adam_direction(m, v, t, c.lr, c.beta1, c.beta2, c.eps, out=tmp)
            np.multiply(g, 1.0 - c.beta1, out=tmp)
            _unmix(m, c.beta1, tmp)
            np.multiply(g, g, out=tmp)
            tmp *= 1.0 - c.beta2
            _unmix(v, c.beta2, tmp)
            np.maximum(v, 0, out=v)  # v_old >= 0; rounding may leave -tiny where v_old = 0
    if c.kind == "adam":
        opt.state[-1] -= 1


def undo_sparse_step(
    cfg: SparseOptimizerConfig,
    weights: np.ndarray,
    state: dict[str, np.ndarray],
    rows: np.ndarray,
    grad: np.ndarray,
) -> None:
    """Arithmetic inverse of ``SparseOptimizer(cfg).apply(weights, state, rows, grad)``.

    ``weights`` (R, d) and ``state`` (per row) are modified in place on ``rows`` (n,) unique;
    ``grad`` (n, d) is the summed gradient the step received (not modified). ``sgd`` and
    ``momentum`` only; writing back the pre-step rows is the exact alternative for any rule.
    """
    if cfg.kind not in SPARSE_UNDOABLE:
        raise ValueError(
            f"no arithmetic undo for sparse {cfg.kind!r}: only {SPARSE_UNDOABLE}; "
            "write back the pre-step rows (SparseUpdate.old) instead"
        )
    w = np.take(weights, rows, axis=0)
    if cfg.kind == "sgd":
        w += grad * cfg.lr
    else:
        v = np.take(state["momentum"], rows, axis=0)
        w += v * cfg.lr
        _unmix(v, cfg.momentum, grad)
        state["momentum"][rows] = v
    weights[rows] = w


# ----------------------------------------------------- pure one-step functions and inverses
def _dense(kind: str, w: np.ndarray, state: list[np.ndarray], **hyper: float) -> DenseOptimizer:
    """A one-parameter DenseOptimizer over copies of ``w`` and ``state``."""
    opt = DenseOptimizer(DenseOptimizerConfig(kind=kind, **hyper), [np.array(w, copy=True)])
    opt.state = [np.array(s, copy=True) for s in state]
    return opt


def sgd_step(w: np.ndarray, g: np.ndarray, lr: float) -> np.ndarray:
    """``w - lr * g`` (the trainer's dense SGD step)."""
    opt = _dense("sgd", w, [], lr=lr)
    opt.step([g])
    return opt.params[0]


def sgd_undo(w: np.ndarray, g: np.ndarray, lr: float) -> np.ndarray:
    """Inverse of :func:`sgd_step`: ``w + lr * g``."""
    opt = _dense("sgd", w, [], lr=lr)
    undo_dense_step(opt, [g])
    return opt.params[0]


def momentum_step(
    w: np.ndarray, v: np.ndarray, g: np.ndarray, lr: float, mu: float
) -> tuple[np.ndarray, np.ndarray]:
    """``v = mu v + g;  w -= lr v``; returns ``(w, v)``."""
    opt = _dense("momentum", w, [v], lr=lr, momentum=mu)
    opt.step([g])
    return opt.params[0], opt.state[0]


def momentum_undo(
    w: np.ndarray, v: np.ndarray, g: np.ndarray, lr: float, mu: float
) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`momentum_step` from the post-step ``(w, v)``: ``w += lr v;
    v = (v - g) / mu`` (``v`` = 0 when ``mu`` = 0, where the old buffer is dead state)."""
    opt = _dense("momentum", w, [v], lr=lr, momentum=mu)
    undo_dense_step(opt, [g])
    return opt.params[0], opt.state[0]


def adam_step(
    w: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    t: int,
    g: np.ndarray,
    lr: float,
    b1: float,
    b2: float,
    eps: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """One Adam step from step count ``t`` (steps taken so far); returns ``(w, m, v, t + 1)``."""
    opt = _dense("adam", w, [m, v, np.int64(t)], lr=lr, beta1=b1, beta2=b2, eps=eps)
    opt.step([g])
    return opt.params[0], opt.state[0], opt.state[1], int(opt.state[2])


def adam_undo(
    w: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    t: int,
    g: np.ndarray,
    lr: float,
    b1: float,
    b2: float,
    eps: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Inverse of :func:`adam_step` from the post-step ``(w, m, v, t)``, ``t >= 1``."""
    opt = _dense("adam", w, [m, v, np.int64(t)], lr=lr, beta1=b1, beta2=b2, eps=eps)
    undo_dense_step(opt, [g])
    return opt.params[0], opt.state[0], opt.state[1], int(opt.state[2])


def sparse_step(
    cfg: SparseOptimizerConfig,
    weights: np.ndarray,
    state: dict[str, np.ndarray],
    rows: np.ndarray,
    grad: np.ndarray,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The trainer's row-wise step on copies: returns the new ``(weights, state)``."""
    w, s = weights.copy(), {k: a.copy() for k, a in state.items()}
    SparseOptimizer(cfg).apply(w, s, rows, grad.copy())
    return w, s


def sparse_undo(
    cfg: SparseOptimizerConfig,
    weights: np.ndarray,
    state: dict[str, np.ndarray],
    rows: np.ndarray,
    grad: np.ndarray,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Inverse of :func:`sparse_step` (``sgd``, ``momentum``): returns the old ``(weights,
    state)``."""
    w, s = weights.copy(), {k: a.copy() for k, a in state.items()}
    undo_sparse_step(cfg, w, s, rows, grad)
    return w, s


# ------------------------------------------------------------------------- trainer wrapper
class Undoer:
    """Keeps what is needed to undo a trainer's last step, and undoes it on request.

    Registered as an update listener, it copies the step's dense gradients (listeners run
    after the dense step, so ``trainer.model.grads`` still holds them) and keeps the
    step's :class:`SparseUpdate`. :meth:`undo_last_step` restores the state before that
    step: dense parameters and optimizer state by the arithmetic inverse
    (:func:`undo_dense_step`; ``sgd``, ``momentum``, ``adam``), embedding rows either by
    writing back their pre-step values and state (``sparse="rows"``: exact, any sparse rule)
    or by the arithmetic inverse (``sparse="arithmetic"``: ``sgd``, ``momentum``), MFU
    counts, and ``trainer.step``. Only one step can be undone (SWIFT loses at most one
    iteration).
    """

    def __init__(self, trainer: Trainer, sparse: Literal["rows", "arithmetic"] = "rows") -> None:
        dense_kind = trainer.cfg.optimizer.dense.kind
        if dense_kind not in DENSE_UNDOABLE:
            raise ValueError(
                f"no arithmetic undo for dense {dense_kind!r}: only {DENSE_UNDOABLE} "
                "(SWIFT's scope)"
            )
        sparse_cfg = trainer.cfg.optimizer.sparse
        if sparse == "arithmetic" and sparse_cfg.kind not in SPARSE_UNDOABLE:
            raise ValueError(
                f"no arithmetic undo for sparse {sparse_cfg.kind!r}: use sparse='rows'"
            )
        self.trainer = trainer
        self.sparse = sparse
        self._grads = [np.empty_like(g) for g in trainer.model.grads]
        self._update: SparseUpdate | None = None
        trainer.add_update_listener(self._on_update)

    def _on_update(self, update: SparseUpdate) -> None:
        for dst, src in zip(self._grads, self.trainer.model.grads, strict=True):
            np.copyto(dst, src)
        self._update = update

    @property
    def can_undo(self) -> bool:
        """Whether a step was recorded since the last undo."""
        return self._update is not None

    @property
    def nbytes(self) -> int:
        """Bytes kept for the undo: dense gradients plus the sparse rows (ids and gradients,
        and with ``sparse="rows"`` also the pre-step values and state)."""
        dense = sum(g.nbytes for g in self._grads)
        u = self._update
        if u is None:
            return int(dense)
        kept = u.rows.nbytes + u.grad.nbytes + (u.old.nbytes if self.sparse == "rows" else 0)
        return int(dense + kept)

    def undo_last_step(self) -> None:
        """Return the trainer to its state before the last step (``trainer.step -= 1``)."""
        u = self._update
        if u is None:
            raise RuntimeError("no step to undo (nothing trained since creation or last undo)")
        tr = self.trainer
        undo_dense_step(tr.dense_optimizer, self._grads)
        if self.sparse == "rows":
            tr.write_rows(u.old)
        else:
            emb = tr.embeddings
            undo_sparse_step(emb.optimizer.cfg, emb.weights, emb.state, u.rows, u.grad)
        if tr.mfu is not None:
            tr.mfu.counts[u.rows] -= u.counts
        tr.step = u.step
        self._update = None

    def close(self) -> None:
        """Stop recording (removes the listener)."""
        self.trainer.remove_update_listener(self._on_update)
