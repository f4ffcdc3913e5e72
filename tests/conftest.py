"""Shared fixtures: paths to the scenarios and a loader with overrides."""

import signal
from pathlib import Path

import pytest

from ftsim.policies.catalog import policy_params
from ftsim.scenario.loader import load_scenario

policy_params()  # every policy kind imported: tests go through them all

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
SHARED_DATA = ROOT.parent / "shared" / "data"
RUN_FILES = (
    "manifest.json",
    "runs.csv",
    "runs.parquet",
    "scenario.yaml",
    "summary.csv",
    "timeline.csv",
)
"""What a finished run (or sweep) folder holds, sorted."""


@pytest.fixture
def smoke():
    return load_scenario(SCENARIOS / "smoke.yaml")


def scenario(name: str, *overrides: str):
    """Load ``scenarios/<name>.yaml`` with ``--set``-style overrides."""
    return load_scenario(SCENARIOS / f"{name}.yaml", list(overrides))


def terminal_signals() -> None:
    """``preexec_fn`` of a command a test signals as a terminal would: SIGINT and SIGHUP at
    their defaults, as a terminal's foreground job has them. A test runner started in the
    background (``pytest &`` in a script, ``nohup``) ignores them, its children inherit
    that, and ftsim, like any well-behaved command, leaves an ignored signal ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
