"""Evaluation metrics: clipped log loss and exact rank-based AUC (NumPy only)."""

from __future__ import annotations

import numpy as np


def log_loss(labels: np.ndarray, prob: np.ndarray, eps: float = 1e-7) -> float:
    """Mean binary cross-entropy in nats, probabilities clipped to [eps, 1 - eps]."""
    p = np.clip(np.asarray(prob, dtype=np.float64), eps, 1.0 - eps)
    y = np.asarray(labels, dtype=np.float64)
    return float(-np.mean(y * np.log(p) + (1.0 - y) * np.log1p(-p)))


def average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of ``x`` with ties sharing their average rank (like rankdata 'average')."""
    x = np.asarray(x)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    new = np.empty(len(xs), dtype=bool)
    new[:1] = True
    np.not_equal(xs[1:], xs[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(xs))  # exclusive
    avg = 0.5 * (starts + 1 + ends)  # mean of ranks starts+1 .. ends
    ranks = np.empty(len(xs), dtype=np.float64)
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def auc(labels: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney U / (n_pos * n_neg)); ties count one half.

    NaN when only one class is present.
    """
    y = np.asarray(labels) > 0.5
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    r = average_ranks(score)
    return float((r[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def binary_entropy(rate: float) -> float:
    """Log loss (nats) of the constant predictor ``rate`` on data with click rate ``rate``."""
    return float(-(rate * np.log(rate) + (1.0 - rate) * np.log1p(-rate)))
