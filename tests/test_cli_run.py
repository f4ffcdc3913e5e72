"""``ftsim run``: output files, schema, summary, determinism across processes."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.conftest import RUN_FILES, SCENARIOS

REQUIRED = [
    "scenario",
    "policy",
    "rep",
    "seed",
    "ideal_h",
    "wall_h",
    "overhead_frac",
    "save_h",
    "load_h",
    "lost_h",
    "reschedule_h",
    "degraded_h",
    "other_h",
    "n_failures",
    "n_checkpoints",
]


def _run(out, *extra, hash_seed="0"):
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ftsim",
            "run",
            str(SCENARIOS / "smoke.yaml"),
            "-o",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_run_writes_every_file_with_the_schema(tmp_path):
    result = _run(tmp_path / "r", "--reps", "3")
    assert result.returncode == 0, result.stderr
    out = tmp_path / "r"
    for name in RUN_FILES:
        assert (out / name).stat().st_size > 0, name
    runs = pd.read_csv(out / "runs.csv")
    assert set(REQUIRED) <= set(runs.columns)
    assert len(runs) == 3 * 3  # three policies × three replications
    pd.testing.assert_frame_equal(runs, pd.read_parquet(out / "runs.parquet"), check_dtype=False)
    gap = runs.ideal_h + runs[[c for c in REQUIRED if c.endswith("_h")][2:]].sum(axis=1)
    assert (gap - runs.wall_h).abs().max() < 1e-9 * runs.wall_h.max()
    timeline = pd.read_csv(out / "timeline.csv")
    assert set(timeline.rep) == {0} and {"compute", "save"} <= set(timeline.kind)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["seed"] == 7 and len(manifest["config_hash"]) == 12
    assert manifest["versions"]["simpy"]
    assert "overhead" in result.stdout and "full_daly" in result.stdout


def test_policy_filter_and_seed_override(tmp_path):
    result = _run(tmp_path / "r", "--policy", "checkfreq", "--seed", "11", "--reps", "2", "-q")
    assert result.returncode == 0 and result.stdout == ""
    runs = pd.read_csv(tmp_path / "r" / "runs.csv")
    assert set(runs.policy) == {"checkfreq"} and set(runs.seed) == {11}


def test_same_seed_gives_identical_results_across_processes(tmp_path):
    first = _run(tmp_path / "a", "--reps", "5", "-q", hash_seed="1")
    second = _run(tmp_path / "b", "--reps", "5", "-q", hash_seed="12345")
    assert first.returncode == second.returncode == 0
    for name in ("runs.csv", "timeline.csv", "summary.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_a_different_seed_gives_different_failures(tmp_path):
    _run(tmp_path / "a", "--reps", "2", "-q")
    _run(tmp_path / "b", "--reps", "2", "-q", "--seed", "8")
    a = pd.read_csv(tmp_path / "a" / "runs.csv")
    b = pd.read_csv(tmp_path / "b" / "runs.csv")
    assert not a.wall_h.equals(b.wall_h)


@pytest.mark.parametrize("what", [["show", "policies"], ["show", "config", "scenarios/smoke.yaml"]])
def test_show(what):
    result = subprocess.run(
        [sys.executable, "-m", "ftsim", *what], capture_output=True, text=True, cwd=SCENARIOS.parent
    )
    assert result.returncode == 0 and "interval" in result.stdout


def test_version(capsys):
    """The first command a new user tried was a usage error."""
    import ftsim
    from ftsim.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"ftsim {ftsim.__version__}\n"


def test_show_policies_gives_each_kind_a_whole_sentence_and_each_field_its_type(capsys):
    """A new user's policy was summarised mid-sentence (its docstring's first line), and its
    fields had no type, unit or bounds, which the scenario reference gives."""
    from ftsim.cli import _first_sentence, main

    assert _first_sentence("every interval a checkpoint; every n-th one is full, the others "
                           "write a fraction. Then more.") == (
        "every interval a checkpoint; every n-th one is full, the others write a fraction."
    )  # fmt: skip
    assert _first_sentence("no stop") == "no stop"
    assert main(["show", "policies"]) == 0
    out = capsys.readouterr().out
    assert (
        "\n    fraction: share r of rows per partial save (default 0.05) [number, > 0, ≤ 1]\n"
        in out
    )
    assert (
        "\n    interval: compute between checkpoints, or young/daly (default 'daly') [duration, "
        "e.g. '30 min', or young / daly]\n" in out
    )
    assert all(line.endswith((".", ")")) for line in out.splitlines() if not line[0].isspace())


def test_quiet_silences_the_table_not_the_decisions_taken(tmp_path, capsys):
    """``run -q`` dropped the notes on decisions taken for the user (a failure log's skipped
    rows here), which ``sweep -q`` kept: ``-q`` silences the progress and the table only."""
    from ftsim.cli import main

    scenario = str(SCENARIOS / "failure_log_example.yaml")
    args = ["run", scenario, "--no-trainer", "--reps", "1", "-q", "-o", str(tmp_path / "r")]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert "failures.0: failure log synthetic_lanl_failures.csv: 27 rows, 24 replayed" in err
