"""Full recovery under exponential failures against Daly's closed form (scenarios/daly.yaml)."""

import pytest

from ftsim.validation.daly import daly_optimum_s, daly_points, simulated_optimum_s


def test_daly_optimum_of_the_scenario_is_the_published_example():
    assert daly_optimum_s() / 60 == pytest.approx(116.7, abs=0.05)


def test_mean_wall_time_matches_daly_from_quarter_to_four_times_the_optimum():
    points = daly_points([0.25, 0.5, 1.0, 2.0, 4.0], reps=40)
    for point in points:
        assert point.within < 3, point
    # The optimum really is better than a quarter or four times the interval.
    best = min(points, key=lambda p: p.simulated_h)
    assert best.interval_s == pytest.approx(daly_optimum_s())


def test_simulated_optimum_is_within_five_percent_of_daly():
    assert simulated_optimum_s(reps=400) == pytest.approx(daly_optimum_s(), rel=0.05)
