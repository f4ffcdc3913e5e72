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
