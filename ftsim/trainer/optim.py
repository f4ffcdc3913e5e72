"""Update rules: dense (MLP) optimizers and sparse, row-wise embedding optimizers.

Dense rules (``DenseOptimizer``; ``g`` the parameter's gradient):

* ``sgd``:      ``w -= lr * g``
* ``momentum``: ``v = mu * v + g;  w -= lr * v``
* ``adagrad``:  ``a += g**2;  w -= lr * g / (sqrt(a) + eps)``
* ``adam``:     ``t += 1;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g**2;
  w -= lr * m_hat / (sqrt(v_hat) + eps)`` with ``m_hat = m / (1 - b1**t)``,
  ``v_hat = v / (1 - b2**t)`` (PyTorch's ``Adam``, ``amsgrad=False``, no weight decay)

Sparse rules touch only the rows a batch used and keep their state per row, so the
fault-tolerance strategies can save, restore, erasure-code and undo it by row and by shard:

* ``sgd``:              ``w -= lr * g``                                   (no state)
* ``momentum``:         ``v = mu * v + g;  w -= lr * v``                  state ``momentum`` (R, d)
* ``rowwise_adagrad``:  ``a += mean(g**2);  w -= lr * g / (sqrt(a) + eps)``  state ``accum`` (R,)

``g`` is the gradient of a row summed over the batch. Momentum is lazy (rows not in the batch
keep their buffer), as in PyTorch sparse SGD and FBGEMM.
"""

from __future__ import annotations

import math

import numpy as np

from ftsim.trainer.config import DenseOptimizerConfig, SparseOptimizerConfig


def adam_direction(
    m: np.ndarray,
    v: np.ndarray,
    t: int,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    out: np.ndarray,
) -> np.ndarray:
    """Adam's step ``lr * m_hat / (sqrt(v_hat) + eps)`` at step count ``t >= 1`` into ``out``.

    ``m``, ``v``, ``out``: arrays of one shape (``out`` aliases neither). The step and its
    inverse (``ftsim.trainer.undo``) both call this, so the inverse recomputes the applied
    step bit for bit from the post-step ``m``, ``v``, ``t``.
    """
    np.sqrt(v, out=out)
    out /= math.sqrt(1.0 - beta2**t)
    out += eps
    np.divide(m, out, out=out)
    out *= lr / (1.0 - beta1**t)
    return out


class DenseOptimizer:
    """In-place optimizer over a fixed list of dense parameter arrays.

    ``state`` (saved and restored by trainer snapshots): empty for ``sgd``; one array per
    parameter for ``momentum`` (velocity) and ``adagrad`` (sum of squares); for ``adam``
    ``[m_0 .. m_{n-1}, v_0 .. v_{n-1}, t]`` with ``t`` a 0-d int64 array (steps taken).
    """

    def __init__(self, cfg: DenseOptimizerConfig, params: list[np.ndarray]) -> None:
        self.cfg = cfg
        self.params = params
        self.state: list[np.ndarray] = (
            [np.zeros_like(p) for p in params] if cfg.kind in ("momentum", "adagrad") else []
        )
        if cfg.kind == "adam":
            moments = [np.zeros_like(p) for p in params] + [np.zeros_like(p) for p in params]
            self.state = [*moments, np.zeros((), dtype=np.int64)]
        self._scratch = [np.empty_like(p) for p in params]

    def adam_state(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Adam moments ``(m, v)`` of parameter ``i`` (views into ``state``; kind=adam)."""
        return self.state[i], self.state[len(self.params) + i]

    def step(self, grads: list[np.ndarray]) -> None:
        """Apply one update from ``grads`` (same order as ``params``; not modified)."""
        lr = self.cfg.lr
        if self.cfg.kind == "adam":
            self.state[-1] += 1
        for i, (p, g) in enumerate(zip(self.params, grads, strict=True)):
            tmp = self._scratch[i]
            if self.cfg.kind == "sgd":
                np.multiply(g, lr, out=tmp)
            elif self.cfg.kind == "momentum":
                v = self.state[i]
                v *= self.cfg.momentum
                v += g
                np.multiply(v, lr, out=tmp)
            elif self.cfg.kind == "adam":
                self._adam(i, g, tmp)
            else:  # adagrad
                a = self.state[i]
                np.multiply(g, g, out=tmp)
                a += tmp
                np.sqrt(a, out=tmp)
                tmp += self.cfg.eps
                np.divide(g, tmp, out=tmp)
                tmp *= lr
            p -= tmp

    def _adam(self, i: int, g: np.ndarray, tmp: np.ndarray) -> None:
        """Update the moments of parameter ``i`` from ``g``; Adam's step into ``tmp``."""
        c = self.cfg
        m, v = self.adam_state(i)
        m *= c.beta1
        np.multiply(g, 1.0 - c.beta1, out=tmp)
        m += tmp
        v *= c.beta2
        np.multiply(g, g, out=tmp)
        tmp *= 1.0 - c.beta2
        v += tmp
        adam_direction(m, v, int(self.state[-1]), c.lr, c.beta1, c.beta2, c.eps, out=tmp)


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
