"""The accuracy-transfer study's figures (``benchmarks/accuracy_scale.py``) on made-up runs
whose answers are known: no training (``tests/test_benchmarks.py`` runs the study's
``--quick`` mode end to end)."""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ROOT

_spec = importlib.util.spec_from_file_location(
    "accuracy_scale", ROOT / "benchmarks" / "accuracy_scale.py"
)
study = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(study)

SLOPE = 0.01
"""Log-loss change per unit PLS of the made-up vanilla CPR runs (nats)."""
CPR_GB = {"cpr_pls0.05": 300.0, "cpr": 200.0, "cpr_pls0.2": 100.0}
"""Saved bytes of each CPR level (GB): fewer saves at a higher target PLS."""


def _runs(reps: int = 4, mfu: float = 0.5, ssu: float = 0.25, curve=lambda pls: SLOPE * pls):
    """Rows as a sweep writes them: CPR's loss change is ``curve(pls)``; MFU and SSU save
    150 GB (half-way between CPR's 0.1 and 0.2 levels) and lose ``mfu`` / ``ssu`` times
    CPR's mean loss change there."""
    rows = []
    spread = 1 + 0.1 * np.arange(reps)  # each replication's measured PLS differs
    for rep in range(reps):
        common = {"rep": rep, "baseline_logloss": 0.50 + 0.002 * rep}
        for policy, level in study.LEVELS.items():
            pls = level * spread[rep]
            delta = curve(pls)
            rows.append(
                common
                | dict(
                    policy=policy,
                    kind="cpr",
                    pls_measured=pls,
                    saved_gb=CPR_GB[policy],
                    logloss_delta=delta,
                )
            )
        half_way = 0.5 * (np.mean(curve(0.1 * spread)) + np.mean(curve(0.2 * spread)))
        for kind, factor in (("cpr_mfu", mfu), ("cpr_ssu", ssu)):
            delta = factor * half_way * spread[rep] / spread.mean()
            rows.append(
                common
                | dict(
                    policy=kind, kind=kind, pls_measured=0.05, saved_gb=150.0, logloss_delta=delta
                )
            )
    return pd.DataFrame(rows)


def _refs(reps: int = 4) -> pd.DataFrame:
    return pd.DataFrame({"rep": range(reps), "constant_logloss": 0.56, "optimum_logloss": 0.44})


def _load(tmp_path, runs: pd.DataFrame, name: str = "base") -> pd.DataFrame:
    (tmp_path / name).mkdir()
    runs.to_csv(tmp_path / name / "runs.csv", index=False)
    return study.load(tmp_path / name)


def test_exact_figures_of_runs_on_a_line_through_the_origin(tmp_path):
    runs = _load(tmp_path, _runs())
    got = study.statistics(runs, _refs(), np.arange(4))
    learned_nats = 0.56 - np.mean(0.50 + 0.002 * np.arange(4))
    assert got["slope"] == pytest.approx(SLOPE, rel=1e-12)
    assert got["within"] == pytest.approx(SLOPE, rel=1e-12)
    assert got["relative"] == pytest.approx(SLOPE / learned_nats, rel=1e-12)
    assert got["learned"] == pytest.approx(learned_nats / 0.12, rel=1e-12)
    assert got["mfu_red"] == pytest.approx(0.5, rel=1e-12)
    assert got["ssu_red"] == pytest.approx(0.75, rel=1e-12)


def test_the_slope_is_the_least_squares_line_through_the_origin(tmp_path):
    """On a curved response, the line through the origin (Σ xy / Σ x²) and not a line with
    an intercept, nor the mean ratio."""
    runs = _load(tmp_path, _runs(curve=lambda pls: pls**2))
    got = study.statistics(runs, _refs(), np.arange(4))["slope"]
    cpr = runs[runs.level.notna()]
    x, y = cpr.pls_measured.to_numpy(), cpr.logloss_delta.to_numpy()
    assert got == pytest.approx(np.sum(x * y) / np.sum(x * x), rel=1e-12)
    assert got != pytest.approx(np.polyfit(x, y, 1)[0], rel=1e-3)
    assert got != pytest.approx(np.mean(y / x), rel=1e-3)


def test_a_shift_common_to_a_replications_policies_moves_only_the_line_through_0(tmp_path):
    """Chaotic training turns any perturbation into a shift of its own, the same for every
    policy of the replication: the slope within replications does not see it."""
    runs = _runs()
    runs["logloss_delta"] += np.array([2e-3, -1e-3, 5e-4, -3e-3])[runs.rep]
    got = study.statistics(_load(tmp_path, runs), _refs(), np.arange(4))
    assert got["within"] == pytest.approx(SLOPE, rel=1e-9)
    assert got["slope"] != pytest.approx(SLOPE, rel=1e-2)


def test_a_replication_without_every_policy_is_left_out(tmp_path):
    runs = _runs()
    runs = runs[~((runs.rep == 2) & (runs.policy == "cpr_ssu"))]
    assert sorted(_load(tmp_path, runs).rep.unique()) == [0, 1, 3]


def test_a_resample_weighs_whole_replications(tmp_path):
    """Drawing replication 0 twice is the same as a data set holding it twice."""
    runs = _load(tmp_path, _runs(curve=lambda pls: pls**2))
    twice = pd.concat([runs, runs[runs.rep == 0].assign(rep=4)], ignore_index=True)
    refs = pd.concat([_refs(), _refs(1).assign(rep=4)], ignore_index=True)
    resampled = study.statistics(runs, _refs(), np.array([0, 0, 1, 2, 3]))
    assert resampled == pytest.approx(study.statistics(twice, refs, np.arange(5)), rel=1e-12)


def test_the_ratio_to_the_base_configuration_is_paired(tmp_path):
    """Two configurations with the same replications share their resamples: identical runs
    give a ratio of exactly 1 with a zero-width interval (unpaired resamples would not)."""
    runs = _runs(curve=lambda pls: pls**2 + 0.01 * pls * np.sin(50 * pls))
    for name in ("base", "dim16"):
        _load(tmp_path, runs, name)
    table = study.report(tmp_path, ["base", "dim16"], ["trainer.eval_samples=64"], draws=50)
    row = next(line for line in table.splitlines() if line.startswith("| dim16 "))
    assert "| 1.00 [1.00, 1.00] |" in row
    assert re.search(r"\| 4 \| 0\.5030 \|", row)
