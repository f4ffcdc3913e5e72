"""The curated example under ``results/examples/prod50h`` is what the code computes now.

Timing columns are recomputed for every row (timing only: the time model never depends on
the trainer) and must be equal to the last digit. The accuracy columns of replication 0
are recomputed with the trainer: the measured PLS counts lookups (integers) and must be
equal; the log loss comes from training in floating point, whose last bits depend on the
BLAS kernel, so it must agree within 2e-3 (one thousandth of a nat is ten times what a
perturbation of 1e-6 in every parameter moves it, and a tenth of a typical policy effect).
"""

import csv
import subprocess
import sys

import pytest

from ftsim.sim.accounting import CATEGORIES
from tests.conftest import ROOT

EXAMPLE = ROOT / "results" / "examples" / "prod50h"
TIMING = (
    "ideal_h",
    "wall_h",
    "overhead_frac",
    *(f"{category}_h" for category in CATEGORIES),
    "n_failures",
    "n_checkpoints",
    "pls_model",
)
"""Columns the time model computes (the accounting categories and what it counts)."""


def _rows(path) -> dict[tuple[str, str], dict]:
    with open(path, newline="") as handle:
        return {(r["policy"], r["rep"]): r for r in csv.DictReader(handle)}


def _run(out, *extra: str) -> None:
    command = [sys.executable, "-m", "ftsim", "run", str(EXAMPLE / "scenario.yaml")]
    subprocess.run([*command, "-q", "-o", str(out), *extra], check=True, cwd=ROOT)


def test_the_example_is_complete_and_light():
    names = {p.name for p in EXAMPLE.rglob("*") if p.is_file()}
    assert {"summary.csv", "runs.csv", "scenario.yaml", "manifest.json"} <= names
    assert {"breakdown.png", "accuracy_vs_overhead.png", "timeline.png"} <= names
    kept = [  # as committed: .gitignore leaves out sweeps' shards and the Parquet copies
        p
        for p in (ROOT / "results" / "examples").rglob("*")
        if p.is_file() and "shards" not in p.parts and p.name != "runs.parquet"
    ]
    assert sum(p.stat().st_size for p in kept) < 3e6
    assert all(p.stat().st_size < 100e3 for p in EXAMPLE.rglob("*.pdf"))


def test_every_timing_column_is_what_the_code_computes_now(tmp_path):
    _run(tmp_path / "now", "--no-trainer")
    committed, now = _rows(EXAMPLE / "runs.csv"), _rows(tmp_path / "now" / "runs.csv")
    assert committed.keys() == now.keys()
    for key, row in committed.items():
        for column in TIMING:
            if column in row:
                assert now[key][column] == row[column], (key, column)


def test_replication_0_trains_to_the_committed_accuracy(tmp_path):
    _run(tmp_path / "now", "--reps", "1", "--set", "trainer.replications=1")
    committed, now = _rows(EXAMPLE / "runs.csv"), _rows(tmp_path / "now" / "runs.csv")
    for key, row in now.items():
        assert row["pls_measured"] == committed[key]["pls_measured"], key
        for column in ("final_logloss", "logloss_delta"):
            assert float(row[column]) == pytest.approx(float(committed[key][column]), abs=2e-3)


INTERVAL_EXAMPLE = ROOT / "results" / "examples" / "prod50h_interval"


def test_the_interval_example_is_what_the_code_computes_now(tmp_path):
    """Figure (b)'s sweep, re-run from its folder's scenario.yaml (which holds the sweep),
    gives every timing column of every row, and CPR's decision, to the last digit."""
    command = [sys.executable, "-m", "ftsim", "sweep", str(INTERVAL_EXAMPLE / "scenario.yaml")]
    out = tmp_path / "now"
    policies = ["--policy", "full", "--policy", "cpr"]  # its scenario.yaml keeps them all
    subprocess.run(
        [*command, *policies, "--no-trainer", "-q", "-o", str(out)], check=True, cwd=ROOT
    )

    def rows(path):
        with open(path, newline="") as handle:
            return {(r["point"], r["policy"], r["rep"]): r for r in csv.DictReader(handle)}

    committed, now = rows(INTERVAL_EXAMPLE / "runs.csv"), rows(out / "runs.csv")
    assert committed.keys() == now.keys()
    for key, row in committed.items():
        for column in (*TIMING, "interval_h", "cpr_decision"):
            if column in row:
                assert now[key][column] == row[column], (key, column)
    assert {"overhead_vs_interval.png", "breakdown.png"} <= {
        p.name for p in (INTERVAL_EXAMPLE / "plots").iterdir()
    }


SPARES_EXAMPLE = ROOT / "results" / "examples" / "operations_spares"
OPERATIONS = (
    "n_node_failures_good",
    "n_node_failures_bad",
    "n_retired",
    "n_waited_for_repair",
    "spare_wait_h",
)
"""Result columns of cluster operations."""


def test_the_spares_example_is_what_the_code_computes_now(tmp_path):
    """The sweep over the spare count, re-run from its folder's scenario.yaml, gives every
    timing and operations column of every row to the last digit; its figure is there."""
    command = [sys.executable, "-m", "ftsim", "sweep", str(SPARES_EXAMPLE / "scenario.yaml")]
    out = tmp_path / "now"
    subprocess.run([*command, "-q", "-o", str(out)], check=True, cwd=ROOT)

    def rows(path):
        with open(path, newline="") as handle:
            return {(r["point"], r["policy"], r["rep"]): r for r in csv.DictReader(handle)}

    committed, now = rows(SPARES_EXAMPLE / "runs.csv"), rows(out / "runs.csv")
    assert committed.keys() == now.keys()
    for key, row in committed.items():
        for column in (*TIMING, *OPERATIONS):
            assert now[key][column] == row[column], (key, column)
    assert "breakdown.png" in {p.name for p in (SPARES_EXAMPLE / "plots").iterdir()}
