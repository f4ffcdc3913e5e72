"""Closed forms and the t quantile, against published and scipy values."""

import math

import pytest

from ftsim.experiments.stats import mean_ci, t_quantile
from ftsim.sim.theory import daly_interval_s, daly_wall_s, first_order_waste, young_interval_s


def test_daly_published_example():
    # background.md: M = 24 h, δ = 5 min, R = 10 min → τ* ≈ 116.7 min.
    assert daly_interval_s(300, 24 * 3600) / 60 == pytest.approx(116.7, abs=0.05)


def test_young_is_first_order_optimum():
    delta, mtbf = 300.0, 86400.0
    tau = young_interval_s(delta, mtbf)
    waste = [first_order_waste(tau * f, delta, 0, mtbf) for f in (0.9, 1.0, 1.1)]
    assert waste[1] < waste[0] and waste[1] < waste[2]


def test_daly_optimum_minimizes_daly_wall_time():
    delta, restart, mtbf = 300.0, 600.0, 86400.0
    tau = daly_interval_s(delta, mtbf)
    grid = [tau * (0.8 + 0.001 * k) for k in range(401)]
    best = min(grid, key=lambda t: daly_wall_s(1e6, t, delta, restart, mtbf))
    assert best == pytest.approx(tau, rel=0.01)


def test_daly_wall_time_tends_to_solve_time_without_failures():
    assert daly_wall_s(1e5, 3600, 60, 600, 1e15) == pytest.approx(1e5 * (3660 / 3600), rel=1e-6)


@pytest.mark.parametrize("df", [1, 2, 3, 5, 9, 29, 99, 1000])
@pytest.mark.parametrize("p", [0.6, 0.9, 0.975, 0.995])
def test_t_quantile_matches_scipy(df, p):
    from scipy.stats import t

    assert t_quantile(p, df) == pytest.approx(t.ppf(p, df), rel=1e-9)


def test_mean_ci_by_hand():
    mean, half, n = mean_ci([1.0, 2.0, 3.0, 4.0])
    assert (mean, n) == (2.5, 4)
    assert half == pytest.approx(3.182446305284263 * math.sqrt(5 / 3) / 2)
