"""``unique_lookup_fraction: zipf``: the touched rows of ECRM's parity and SWIFT's log derived
from the job's row popularity, checked against direct sums over every row."""

import dataclasses

import numpy as np
import pytest

from ftsim.experiments.runner import simulate
from ftsim.policies.inputs import PlanInputs
from ftsim.scenario.loader import ScenarioError
from tests.conftest import scenario

ZIPF = ("policies.4.unique_lookup_fraction=zipf", "policies.5.unique_lookup_fraction=zipf")
NO_TRAINER = "trainer.enabled=false"


def _distinct_share(rows: int, exponent: float, draws: int) -> float:
    """Expected distinct rows among ``draws`` lookups of one Zipf table, over the lookups:
    Σ_k 1 − (1 − π_k)^draws summed over every row, in chunks of a million rows."""
    k = np.arange(1, rows + 1, dtype=np.float64)
    norm = sum(float((k[i : i + 10**6] ** -exponent).sum()) for i in range(0, rows, 10**6))
    hit = 0.0
    for i in range(0, rows, 10**6):
        p = k[i : i + 10**6] ** -exponent / norm
        hit += float(-np.expm1(draws * np.log1p(-p)).sum())
    return hit / draws


def test_prod50h_s_derived_share_is_the_direct_sum_over_its_33_m_rows():
    s = scenario("prod50h", *ZIPF)
    derived = s.policies[4].unique_fraction(PlanInputs.of(s))
    assert derived == pytest.approx(_distinct_share(33_000_000, 1.05, 20480), rel=1e-6)
    assert 0.48 < derived < 0.50  # against the 0.3 prod50h assumes
    assert s.policies[5].unique_fraction(PlanInputs.of(s)) == derived


def test_small_tables_and_per_table_exponents_are_summed_exactly():
    """26 tables of 1000 rows, the trainer's per-table exponents 0.8 (13 tables) and 1.3
    (13): the share is the mean of the two tables' direct sums (every table gets one lookup
    per sample)."""
    s = scenario(
        "prod50h",
        *ZIPF,
        "job.tables=[{name: t, count: 26, rows: 1000, dim: 8}]",
        "job.samples_per_iteration=256",
        f"trainer.data.zipf_exponent={[0.8] * 13 + [1.3] * 13}",
    )
    want = (_distinct_share(1000, 0.8, 256) + _distinct_share(1000, 1.3, 256)) / 2
    assert s.policies[4].unique_fraction(PlanInputs.of(s)) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("index", [4, 5])
def test_zipf_runs_as_the_derived_number_would(index):
    """The time model uses the derived share: set as a number, the same replication gives
    the same row bit for bit; the 0.3 assumption gives another."""
    derived_s = scenario("prod50h", *ZIPF, NO_TRAINER)
    share = derived_s.policies[index].unique_fraction(PlanInputs.of(derived_s))
    number = scenario("prod50h", f"policies.{index}.unique_lookup_fraction={share!r}", NO_TRAINER)
    derived, explicit = simulate(derived_s, index, 3).row(), simulate(number, index, 3).row()
    assert derived == explicit
    assert simulate(scenario("prod50h", NO_TRAINER), index, 3).row() != derived


def test_a_composed_part_derives_the_share_from_the_whole_job():
    """A part's rows are not Zipf tables of their own: a part asking for zipf gets the job's
    share (its scaled scenario would give another)."""
    s = scenario("composed", "policies.2.parts.0.policy.unique_lookup_fraction=zipf")
    job_share = (
        scenario("prod50h", *ZIPF).policies[4].unique_fraction(PlanInputs.of(scenario("prod50h")))
    )
    sim = simulate(s, 2, 0)
    part = sim.policy.parts[0].params
    assert part.unique_lookup_fraction == pytest.approx(job_share, rel=1e-12)


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("policies.4.unique_lookup_fraction=1.5", r"policies\.4\.unique_lookup_fraction: .*1"),
        ("policies.5.unique_lookup_fraction=zipff", r"policies\.5\.unique_lookup_fraction: "),
        ("policies.4.unique_lookup_fraction=0", r"policies\.4\.unique_lookup_fraction: .*0"),
    ],
)
def test_a_bad_share_is_a_located_error(override, words):
    with pytest.raises(ScenarioError, match=words):
        scenario("prod50h", override)


def test_exponents_that_do_not_pair_with_the_tables_are_a_problem():
    """Built by hand (the trainer's own validation refuses such a list first): with zipf the
    policy names its popularity_exponent; with a number it needs no popularity."""
    s = scenario("prod50h", *ZIPF)
    odd = dataclasses.replace(PlanInputs.of(s), exponents=(1.0, 1.1))
    for policy in s.policies[4:]:
        [(field, message)] = policy.input_problems(odd)
        assert field == "popularity_exponent" and "lists 2 exponents but the job has 26" in message
    assert scenario("prod50h").policies[5].input_problems(odd) == []
