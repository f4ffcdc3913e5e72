"""Start-up: a timing-only ``ftsim run`` loads only what the run needs.

A timing-only run must not import the trainer (its config only for a scenario with a
``trainer:`` section, which the config validates: ``--no-trainer`` makes one), pandas, SciPy
or Matplotlib (issue 26: start-up was 6× the floor of ``import numpy, simpy, yaml``), nor the
modules of policy kinds the scenario does not name (:mod:`ftsim.policies.catalog` imports
them on demand). Each check
runs the command in a fresh interpreter and reads ``sys.modules`` at its end; the teeth
tests put one eager import back into a copy of the package and see it caught.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ftsim.policies.registry import POLICIES

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "scenarios" / "smoke.yaml"  # policies of one kind: full

HEAVY = ("pandas", "scipy", "matplotlib", "dask", "tqdm")
"""Libraries a timing-only run does without (tables and the summary are written without
pandas; figures, statistics tables and progress bars are other commands' business)."""

TRAINER_ALLOWED = {"ftsim.trainer", "ftsim.trainer.limits"}
"""The bounds the row-popularity model shares with the trainer's data."""

WITH_SECTION = TRAINER_ALLOWED | {"ftsim.trainer.config"}
"""The trainer's config is the schema of a scenario's ``trainer:`` section."""

OTHER_KINDS = {f"ftsim.policies.{i.module}" for i in POLICIES} - {"ftsim.policies.full"}
"""The modules of the policy kinds smoke.yaml does not name."""

_PROGRAM = """
import json, sys
from ftsim.cli import main
status = main(sys.argv[1:])
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


def modules_after_run(tmp_path: Path, package_root: Path = ROOT, *options: str) -> set[str]:
    """The modules loaded once ``run smoke.yaml`` (which has no ``trainer:`` section) with
    ``options`` has finished, the ftsim package imported from ``package_root``."""
    out = str(tmp_path / "out")
    argv = ["run", str(SMOKE), *options, "--reps", "1", "-q", "-o", out, "--force"]
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM, *argv],
        cwd=package_root,
        env={"PYTHONPATH": str(package_root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["status"] == 0, done.stderr
    return set(report["modules"])


def unneeded(modules: set[str], allowed: set[str] = TRAINER_ALLOWED) -> list[str]:
    """The loaded modules a timing-only run should not have loaded (of the trainer's, those
    not ``allowed``)."""
    found = [m for m in modules if m.split(".")[0] in HEAVY or m.startswith("ftsim.trainer.")]
    return sorted({m for m in found if m not in allowed} | (modules & OTHER_KINDS))


def test_a_timing_run_loads_only_what_it_needs(tmp_path):
    modules = modules_after_run(tmp_path)
    assert unneeded(modules) == []
    assert "ftsim.policies.full" in modules  # the check looks at the right process
    # --no-trainer gives the scenario a trainer section (disabled): its schema is loaded
    modules = modules_after_run(tmp_path, ROOT, "--no-trainer")
    assert unneeded(modules, WITH_SECTION) == []
    assert "ftsim.trainer.config" in modules


@pytest.mark.parametrize(
    ("file", "statement", "caught"),
    [
        # the trainer package importing its modules at once, as it did
        ("trainer/__init__.py", "from ftsim.trainer import trainer", "ftsim.trainer.trainer"),
        # a pandas import on the way to the results
        ("experiments/output.py", "import pandas", "pandas"),
        # the catalog importing every policy module, as it did
        ("policies/catalog.py", "from ftsim.policies import ecrm", "ftsim.policies.ecrm"),
        # the schema importing the trainer section's model (the trainer's config), as it did
        ("scenario/schema.py", "import ftsim.scenario.trainer_section", "ftsim.trainer.config"),
    ],
)
def test_an_eager_import_put_back_is_caught(tmp_path, file, statement, caught):
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "ftsim", copy / "ftsim", ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "ftsim" / file).open("a") as module:
        module.write(f"\n{statement}\n")
    assert caught in unneeded(modules_after_run(tmp_path, copy))
