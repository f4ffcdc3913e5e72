"""Update rules: dense (MLP) optimizers and sparse, row-wise embedding optimizers.

Sparse rules touch only the rows a batch used and keep their state per row, so the
fault-tolerance strategies can save, restore, erasure-code and undo it by row and by shard:

* ``sgd``:              ``w -= lr * g``                                   (no state)
* ``momentum``:         ``v = mu * v + g;  w -= lr * v``                  state ``momentum`` (R, d)
* ``rowwise_adagrad``:  ``a += mean(g**2);  w -= lr * g / (sqrt(a) + eps)``  state ``accum`` (R,)

``g`` is the gradient of a row summed over the batch. Momentum is lazy (rows not in the batch
keep their buffer), as in PyTorch sparse SGD and FBGEMM.
"""

from __future__ import annotations

import numpy as np

from ftsim.trainer.config import DenseOptimizerConfig, SparseOptimizerConfig


class DenseOptimizer:
    """In-place optimizer over a fixed list of dense parameter arrays."""

    def __init__(self, cfg: DenseOptimizerConfig, params: list[np.ndarray]) -> None:
        self.cfg = cfg
        self.params = params
        self.state: list[np.ndarray] = (
            [np.zeros_like(p) for p in params] if cfg.kind in ("momentum", "adagrad") else []
        )
        self._scratch = [np.empty_like(p) for p in params]

    def step(self, grads: list[np.ndarray]) -> None:
        """Apply one update from ``grads`` (same order as ``params``; not modified)."""
        lr = self.cfg.lr
        for i, (p, g) in enumerate(zip(self.params, grads, strict=True)):
            tmp = self._scratch[i]
            if self.cfg.kind == "sgd":
                np.multiply(g, lr, out=tmp)
            elif self.cfg.kind == "momentum":
                v = self.state[i]
                v *= self.cfg.momentum
                v += g
                np.multiply(v, lr, out=tmp)
            else:  # adagrad
                a = self.state[i]
                np.multiply(g, g, out=tmp)
                a += tmp
                np.sqrt(a, out=tmp)
                tmp += self.cfg.eps
                np.divide(g, tmp, out=tmp)
                tmp *= lr
            p -= tmp


class SparseOptimizer:
    """Row-wise rule applied to the unique rows of a batch; state arrays are per row."""

    def __init__(self, cfg: SparseOptimizerConfig) -> None:
        self.cfg = cfg

    def state_shapes(self, n_rows: int, dim: int) -> dict[str, tuple[int, ...]]:
        """Shapes of the per-row state arrays for a table of ``n_rows`` x ``dim``."""
        if self.cfg.kind == "momentum":
            return {"momentum": (n_rows, dim)}
        if self.cfg.kind == "rowwise_adagrad":
            return {"accum": (n_rows,)}
        return {}

    def apply(
        self,
        weights: np.ndarray,
        state: dict[str, np.ndarray],
        rows: np.ndarray,
        grad: np.ndarray,
    ) -> None:
        """Update ``weights[rows]`` (and ``state[*][rows]``) from summed gradients.

        ``rows`` must be unique; ``grad`` (n, d) is overwritten.
        """
        lr = self.cfg.lr
        w = np.take(weights, rows, axis=0)  # np.take: much faster than weights[rows]
        if self.cfg.kind == "sgd":
            grad *= lr
        elif self.cfg.kind == "momentum":
            v = np.take(state["momentum"], rows, axis=0)
            v *= self.cfg.momentum
            v += grad
            state["momentum"][rows] = v
            np.multiply(v, lr, out=grad)
        else:  # rowwise_adagrad
            acc = np.take(state["accum"], rows)
            acc += np.mean(np.square(grad), axis=1)
            state["accum"][rows] = acc
            scale = np.sqrt(acc)
            scale += self.cfg.eps
            np.divide(lr, scale, out=scale)
            grad *= scale[:, None]
        w -= grad
        weights[rows] = w
