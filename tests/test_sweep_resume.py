"""A sweep killed with SIGKILL and resumed ends with exactly the rows of an uninterrupted one."""

import os
import re
import signal
import subprocess
import sys
import time

from tests.conftest import ROOT, SCENARIOS

REPS, BATCH, POINTS, POLICIES = 100, 10, 2, 3
SWEEP = [
    sys.executable,
    "-m",
    "ftsim",
    "sweep",
    str(SCENARIOS / "smoke.yaml"),
    "--grid",
    "policies.*.interval=10 min,30 min",
    "--reps",
    str(REPS),
    "--batch",
    str(BATCH),
    "-q",
]


def _shards(folder):
    return [p for p in (folder / "shards").glob("p*.csv") if not p.name.endswith("timeline.csv")]


def test_sigkill_then_resume_gives_the_rows_of_an_uninterrupted_run(tmp_path):
    killed = tmp_path / "killed"
    process = subprocess.Popen(
        [*SWEEP, "--jobs", "2", "-o", str(killed)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the kill takes the workers too
    )
    deadline = time.monotonic() + 60
    while not (killed / "shards").exists() or not _shards(killed):
        assert process.poll() is None, "the sweep ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    stored = len(_shards(killed))
    total_tasks = POINTS * POLICIES * REPS // BATCH
    assert 0 < stored < total_tasks
    assert not (killed / "runs.csv").exists()

    resumed = subprocess.run(
        [*SWEEP, "--jobs", "2", "--resume", str(killed)], cwd=ROOT, capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    computed, reused = map(int, re.search(r"computed (\d+), reused (\d+)", resumed.stdout).groups())
    assert reused == stored * BATCH
    assert computed + reused == POINTS * POLICIES * REPS

    whole = tmp_path / "whole"
    subprocess.run([*SWEEP, "--jobs", "1", "-o", str(whole)], cwd=ROOT, check=True)
    for name in ("runs.csv", "timeline.csv", "summary.csv"):
        assert (killed / name).read_bytes() == (whole / name).read_bytes(), name


def test_a_sweep_started_over_and_stopped_is_not_read_as_results(tmp_path, capsys):
    """``sweep -o DIR --force`` stopped before its merge left its new manifest beside the
    earlier sweep's runs.csv: plot and load read the old rows as the new sweep's (exit 0),
    and the printed ``--resume`` line kept ``--force``, which ``--resume`` refuses. Both now
    name the unfinished sweep and how to continue it; an advice's folder is no results."""
    import pytest

    import ftsim
    from ftsim.cli import main, resume_command
    from ftsim.experiments.folders import FolderError
    from ftsim.experiments.store import RunStore

    out = tmp_path / "sweep"
    grid = ["--grid", "policies.*.interval=10 min,30 min", "--reps", "2", "--jobs", "1"]
    args = ["sweep", str(SCENARIOS / "smoke.yaml"), "--no-trainer", *grid, "-q", "-o", str(out)]
    assert main(args) == 0
    manifest = ftsim.load(out).manifest
    started = {k: v for k, v in manifest.items() if k not in ("finished_utc", "files")}
    RunStore.create(out, started | {"config_hash": "another"}, force=True)  # the new start
    assert (out / "runs.csv").is_file()  # the earlier set's rows
    capsys.readouterr()
    assert main(["plot", str(out), "-q"]) == 2
    said = f"ftsim: {out}: holds a sweep that did not finish (its results are not merged yet)"
    assert capsys.readouterr().err == f"{said}: continue it with --resume {out}\n"
    with pytest.raises(FolderError, match="did not finish"):
        ftsim.load(out)
    line = resume_command([*args, "--force"], out)
    assert "--force" not in line and line.endswith(f"--resume {out}")
    advice = tmp_path / "advice"
    advise = ["advise", str(SCENARIOS / "smoke.yaml"), "--reps", "2", "--jobs", "1"]
    assert main([*advise, "--max-pls", "0.1", "-q", "-o", str(advice)]) == 0
    (advice / "runs.csv").write_text((out / "runs.csv").read_text())  # as a sweep's left
    assert main(["plot", str(advice), "-q"]) == 2
    assert "holds the output of 'ftsim advise', not of a run or sweep" in capsys.readouterr().err
