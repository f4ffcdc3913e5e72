"""What the embedded trainer cannot represent of a setting is said: CPR-MFU's and CPR-SSU's
partial saves hold whole rows of the trainer's small tables, so a share of a shard's rows
below a few rows is saved as a larger share there; the trained columns then measure that,
and a notice says so (a new user's advice picked fraction 0.0004: 0.37 of a row)."""

import math

from ftsim.experiments.sweep import policy_notices
from ftsim.scenario.loader import load_scenario
from tests.conftest import SCENARIOS

PROD50H = SCENARIOS / "prod50h.yaml"


def _notices(*overrides, policies=("cpr_mfu", "cpr_ssu")):
    return [str(n) for n in policy_notices(load_scenario(PROD50H, list(overrides), policies))]


def _rows_per_shard() -> float:
    scenario = load_scenario(PROD50H)
    return sum(scenario.trainer.data.table_sizes()) / scenario.cluster.emb_ps


def test_a_fraction_below_a_row_of_the_trainer_is_said_with_the_share_it_saves():
    rows = _rows_per_shard()  # 16,727 rows of 26 capped tables over 18 PS
    assert rows == 16727 / 18
    [said] = _notices("policies.2.fraction=0.0004")
    saved = math.ceil(0.0004 * rows) / rows  # 1 row of 929: 0.0011
    assert said == (
        f"cpr_mfu: fraction 0.0004 is {0.0004 * rows:.2g} of the trainer's {rows:,.0f} rows per "
        f"shard; its partial saves there hold {saved:.2g} of them: pls_measured and "
        "logloss_delta measure that share, pls_model the setting's (more trainer rows: "
        "trainer.data.row_cap)"
    )
    assert said.startswith("cpr_mfu: fraction 0.0004 is 0.37 of the trainer's 929 rows")


def test_shares_the_trainer_holds_within_a_tenth_are_not_said():
    """prod50h's 5%: 46.4 rows per shard, saved as 47 (1.2% more); SSU's buffer of 5% of
    16,727 rows rounds to 836 ids (0.02% less)."""
    assert _notices() == []
    assert _notices("policies.2.fraction=0.01") == []  # 9.3 rows, saved as 10: 7.6% more


def test_an_ssu_buffer_of_less_than_an_id_is_said():
    [said] = _notices("policies.3.fraction=0.00001")  # 0.17 ids of 16,727 rows: 1 id
    assert said.startswith("cpr_ssu: its buffer of 1e-05 of a shard's rows is 0.0093 of")
    assert "its partial saves there hold 6e-05 of them" in said


def test_nothing_is_said_where_nothing_is_trained():
    assert _notices("policies.2.fraction=0.0004", "trainer.enabled=false") == []


def test_a_composed_policys_part_is_said_of_the_part():
    """A part's setting went unsaid: a composition's plan said nothing of its parts."""
    composed = SCENARIOS / "composed.yaml"
    fraction = "policies.3.parts.1.policy.fraction=0.0004"
    [said] = [str(n) for n in policy_notices(load_scenario(composed, [fraction]))]
    assert said.startswith(
        "mfu.swift_shards, part mfu: cpr_mfu: fraction 0.0004 is 0.37 of the trainer's 929 rows"
    )
    assert policy_notices(load_scenario(composed)) == []
