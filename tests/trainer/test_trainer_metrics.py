"""Log loss and exact rank-based AUC with ties."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ftsim.trainer.metrics import auc, average_ranks, binary_entropy, log_loss


def brute_auc(y, s) -> float:
    pos, neg = s[y > 0.5], s[y <= 0.5]
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 6)), min_size=2, max_size=60))
def test_auc_matches_pair_count_with_ties(pairs):
    y = np.array([p[0] for p in pairs], dtype=float)
    s = np.array([p[1] for p in pairs], dtype=float)
    if y.min() == y.max():
        assert np.isnan(auc(y, s))
    else:
        assert abs(auc(y, s) - brute_auc(y, s)) < 1e-12


def test_average_ranks():
    np.testing.assert_array_equal(average_ranks(np.array([3.0, 1.0, 3.0, 2.0])), [3.5, 1, 3.5, 2])


def test_auc_extremes():
    y = np.array([0, 0, 1, 1])
    assert auc(y, np.array([0.1, 0.2, 0.3, 0.4])) == 1.0
    assert auc(y, np.array([0.4, 0.3, 0.2, 0.1])) == 0.0
    assert auc(y, np.zeros(4)) == 0.5


def test_log_loss():
    y = np.array([1, 0, 1, 0])
    assert abs(log_loss(y, np.full(4, 0.5)) - np.log(2)) < 1e-12
    assert log_loss(y, y) < 1e-6  # clipped, finite
    assert np.isfinite(log_loss(y, 1 - y))
    assert abs(log_loss(y, np.full(4, 0.5)) - binary_entropy(0.5)) < 1e-12
