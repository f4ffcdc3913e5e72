"""Every benchmark answers ``--help`` and runs its ``--quick`` smoke mode to the end.

Benchmarks import the simulator's internals, so a change of layout can break one without
any other test noticing (``trainer_step.py`` once failed with an ImportError for several
sessions). Nothing here times anything: the figures are read by people, the exit status by
this test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))


def _run(script: Path, *args: str, timeout_s: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_every_benchmark_is_listed():
    assert len(BENCHMARKS) >= 8, [p.name for p in BENCHMARKS]


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_help(script):
    done = _run(script, "--help", timeout_s=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "quick" in done.stdout


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_quick(script):
    done = _run(script, "--quick", timeout_s=300)
    assert done.returncode == 0, done.stdout[-1000:] + done.stderr[-3000:]
    assert done.stdout.strip(), "a benchmark prints its figures"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


def test_the_cosim_benchmark_passes_run_options_on():
    """``prod50h_cosim.py`` takes ``ftsim run`` options after its own: with ``--no-trainer``
    nothing trains, and it says so instead of failing on the missing model columns."""
    script = ROOT / "benchmarks" / "prod50h_cosim.py"
    done = _run(script, "--quick", "--jobs", "1", "--no-trainer", timeout_s=300)
    assert done.returncode == 0, done.stdout[-1000:] + done.stderr[-3000:]
    assert "no trained replication" in done.stdout


def test_the_checknrun_report_reads_a_timing_only_run(tmp_path):
    """``checknrun_report.py`` on a run made with ``--no-trainer`` failed with an
    AttributeError on the missing ``logloss_delta``; it reports the time columns and says
    the model was not trained."""
    made = subprocess.run(
        [sys.executable, "-m", "ftsim", "run", "scenarios/checknrun.yaml", "--no-trainer"]
        + ["--reps", "2", "-q", "-o", str(tmp_path / "run")],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True, capture_output=True,
    )  # fmt: skip
    assert made.returncode == 0
    done = _run(ROOT / "benchmarks" / "checknrun_report.py", str(tmp_path / "run"), timeout_s=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cnr_q8_partial" in done.stdout and "- (not trained)" in done.stdout
