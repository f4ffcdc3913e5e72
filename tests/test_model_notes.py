"""Behaviours of the time model that docs/model.md states and nothing else pins down.

- CPR's closed-form PLS, m · T_save / (2 · E · T_fail), overestimates the model's own
  exact PLS (``pls_model``) more as the interval grows toward the run's length: the last
  interval is cut short by the end of training, and failures are uniform over the run.
- A synchronous save that a failure interrupts is charged to ``save`` for the time it ran
  and commits nothing: ``full`` rolls back to the previous checkpoint and saves again one
  interval later; CPR (no rollback) saves again as soon as it has recovered.
- Without failures the Daly and target-PLS intervals are infinite: no checkpoint is taken.
"""

from __future__ import annotations

import math

import pytest

from ftsim.sim.engine import simulate
from tests.conftest import scenario

FULL, CPR = 0, 1  # policy indices in prod50h


def _mean(rows, key):
    return sum(r[key] for r in rows) / len(rows)


@pytest.mark.parametrize(
    ("target", "low", "high"),
    [(0.02, 0.97, 1.04), (0.1, 1.03, 1.13), (0.3, 1.15, 1.33)],
)
def test_pls_formula_overestimates_exact_pls_as_interval_grows(target, low, high):
    s = scenario("prod50h", f"policies.{CPR}.target_pls={target}", f"policies.{CPR}.fallback=false")
    rows = [simulate(s, CPR, rep).row() for rep in range(300)]
    assert rows[0]["cpr_decision"] == "partial"
    ratio = rows[0]["pls_predicted"] / _mean(rows, "pls_model")
    # measured on 400 replications: 1.014 (1.8 h), 1.081 (9 h), 1.239 (27 h)
    assert low < ratio < high


def _first_save(s, index):
    """(start, end) in seconds of the first save phase of a failure-free replication."""
    rows = simulate(s, index, 0).timeline_rows()
    save = next(r for r in rows if r["kind"] == "save")
    return save["start_h"] * 3600, save["end_h"] * 3600


def _interrupted(name, index, *overrides):
    """A replication of ``name`` whose first save is interrupted halfway by a failure of
    emb_ps0, and the first save's start and end without it."""
    quiet = scenario(name, "failures=[]", *overrides)
    start, end = _first_save(quiet, index)
    at = (start + end) / 2
    failing = scenario(
        name, f"failures=[{{kind: scheduled, times: ['{at} s'], nodes: [[emb_ps0]]}}]", *overrides
    )
    return simulate(failing, index, 0), start, end, at


def test_interrupted_sync_save_full_rolls_back_and_saves_an_interval_later():
    sim, start, end, at = _interrupted("prod50h", FULL, f"policies.{FULL}.interval=2 h")
    rows = sim.timeline_rows()
    saves = [r for r in rows if r["kind"] == "save"]
    # the interrupted save ran from its start to the failure and is charged to save
    assert saves[0]["start_h"] * 3600 == pytest.approx(start)
    assert saves[0]["end_h"] * 3600 == pytest.approx(at)
    # nothing was committed before it: all of the first interval's work is redone
    assert sim.breakdown_s()["lost"] == pytest.approx(2 * 3600, rel=1e-9)
    # the next save comes one full interval of compute after the restart
    recovered = max(r["end_h"] for r in rows if r["kind"] == "load") * 3600
    assert saves[1]["start_h"] * 3600 == pytest.approx(recovered + 2 * 3600, rel=1e-9)


def test_interrupted_sync_save_cpr_saves_again_right_after_recovery():
    sim, start, _end, at = _interrupted(
        "prod50h",
        CPR,
        f"policies.{CPR}.fallback=false",
        f"policies.{CPR}.target_pls=null",
        f"policies.{CPR}.interval=9 h",
    )
    rows = sim.timeline_rows()
    saves = [r for r in rows if r["kind"] == "save"]
    assert saves[0]["end_h"] * 3600 == pytest.approx(at)
    assert sim.breakdown_s()["lost"] == pytest.approx(0, abs=1e-6)  # CPR never rolls back
    recovered = max(r["end_h"] for r in rows if r["kind"] == "load") * 3600
    assert saves[1]["start_h"] * 3600 == pytest.approx(recovered, abs=1e-6)
    assert sim.row()["n_checkpoints"] >= 1


@pytest.mark.parametrize("index", [FULL, CPR])
def test_no_failures_means_infinite_interval_and_no_checkpoint(index):
    s = scenario("prod50h", "failures=[]")
    row = simulate(s, index, 0).row()
    assert math.isinf(row["interval_h"])
    assert row["n_checkpoints"] == 0
    assert row["save_h"] == 0
