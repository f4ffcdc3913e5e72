"""A run folder is self-contained: its scenario.yaml loads again and reproduces the run.

For every file in scenarios/ (timing only and few replications, to stay fast), and for
runs that train the embedded model at a tiny size or keep only some policies, ``run`` on
the folder's scenario.yaml must write the same runs.csv, byte for byte.
"""

import json

import pytest
import yaml

from ftsim.cli import main
from tests.conftest import SCENARIOS

TIMING = ["--no-trainer", "--reps", "2"]
CASES = {path.stem: (path.stem, TIMING) for path in sorted(SCENARIOS.glob("*.yaml"))} | {
    "prod50h_trained": (
        "prod50h",
        ["--reps", "2", "--set", "trainer.replications=1", "--set", "trainer.steps=20"],
    ),
    "smoke_trained": (
        "smoke",
        ["--reps", "2", "--set", "trainer.replications=2", "--set", "trainer.steps=10"],
    ),
    "prod50h_two_policies": ("prod50h", [*TIMING, "--policy", "cpr", "--policy", "swift"]),
}


def test_every_scenario_file_is_a_case():
    assert {name for name, _ in CASES.values()} == {p.stem for p in SCENARIOS.glob("*.yaml")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_saved_scenario_reproduces_runs_csv(case, tmp_path, capsys):
    name, args = CASES[case]
    first, again = tmp_path / "first", tmp_path / "again"
    assert main(["run", str(SCENARIOS / f"{name}.yaml"), *args, "-q", "-o", str(first)]) == 0
    saved = first / "scenario.yaml"
    assert main(["show", "config", str(saved)]) == 0
    assert main(["run", str(saved), "-q", "-o", str(again)]) == 0
    for file in ("runs.csv", "summary.csv", "timeline.csv"):
        assert (again / file).read_bytes() == (first / file).read_bytes(), file
    manifests = [json.loads((out / "manifest.json").read_text()) for out in (first, again)]
    assert manifests[0]["config_hash"] == manifests[1]["config_hash"]
    resolved = yaml.safe_load(saved.read_text())
    if resolved.get("trainer"):
        assert resolved["trainer"]["sharding"]["n_shards"] == resolved["cluster"]["emb_ps"]


def test_a_run_folder_keeps_only_the_policies_that_ran(tmp_path):
    out = tmp_path / "run"
    args = ["run", str(SCENARIOS / "cpr_pls.yaml"), *TIMING, "-q", "-o", str(out)]
    assert main([*args, "--policy", "cpr_mfu"]) == 0
    resolved = yaml.safe_load((out / "scenario.yaml").read_text())
    assert [p["kind"] for p in resolved["policies"]] == ["cpr_mfu"]
    assert resolved["sweep"]["reference"] is None  # cpr, the reference, did not run


def test_progress_is_a_line_per_trained_task_when_stderr_is_not_a_terminal(tmp_path, capsys):
    """Both replications train: each policy × replication is a task of its own."""
    name, args = CASES["smoke_trained"]
    assert main(["run", str(SCENARIOS / f"{name}.yaml"), *args, "-o", str(tmp_path)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in err] == [f"run: {i}/6 tasks" for i in range(1, 7)]
    assert all(" elapsed, ETA " in line for line in err)
    assert err[-1].startswith("run: 6/6 tasks (100%), 6/6 replications")
