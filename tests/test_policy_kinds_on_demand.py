"""Policy kinds imported on demand (issue 26, start-up): a scenario imports the modules of the
kinds it names, and the scenario schema grows as scenarios name more.

Each check runs in a fresh interpreter (the test session's conftest imports every kind, which
would hide what a process imports on its own); the teeth test plants a bug in a copy of the
package and sees the check fail.
"""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ftsim.policies.registry import POLICIES
from tests.conftest import ROOT, SCENARIOS, scenario

KIND_MODULES = sorted({f"ftsim.policies.{info.module}" for info in POLICIES})

_GROWING = """
import json, sys
from ftsim.policies import catalog
from ftsim.scenario.loader import ScenarioError, load_scenario

def kinds():
    return sorted(m for m in sys.modules if m in {modules})

report = {{}}
smoke = load_scenario("{scenarios}/smoke.yaml")
report["smoke"] = kinds()
prod = load_scenario("{scenarios}/prod50h.yaml")
report["prod50h"] = kinds()
report["kinds"] = [p.kind for p in prod.policies]
report["smoke dumps"] = smoke.model_dump(mode="json")["policies"][0]["kind"]
try:
    load_scenario("{scenarios}/smoke.yaml", ["policies.0.kind=ecrn"])
except ScenarioError as exc:
    report["typo"] = str(exc).split(": ", 1)[1]
report["all"] = kinds()
report["composed"] = [p.kind for p in load_scenario("{scenarios}/composed.yaml").policies]
print(json.dumps(report))
"""


def _python(code: str, package_root: Path = ROOT) -> subprocess.CompletedProcess:
    """``code`` run in a fresh interpreter importing ftsim from ``package_root``."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=package_root,
        env={"PYTHONPATH": str(package_root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )


def _printed(done: subprocess.CompletedProcess):
    """What a run that succeeded printed last, as JSON."""
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _planted(tmp_path: Path, file: str, old: str, new: str) -> Path:
    """A copy of the package with ``old`` replaced by ``new`` in ``file`` (a planted bug);
    the root to import it from."""
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "ftsim", copy / "ftsim", ignore=shutil.ignore_patterns("__pycache__"))
    module = copy / "ftsim" / file
    text = module.read_text()
    assert old in text
    module.write_text(text.replace(old, new))
    return copy


GROWING = _GROWING.format(modules=KIND_MODULES, scenarios=SCENARIOS)


def test_a_scenario_imports_the_kinds_it_names_and_the_schema_grows_with_them():
    report = _printed(_python(GROWING))
    assert report["smoke"] == ["ftsim.policies.full"]
    assert report["prod50h"] == [
        "ftsim.policies.cpr",
        "ftsim.policies.ecrm",
        "ftsim.policies.full",
        "ftsim.policies.swift",
    ]
    assert report["kinds"] == ["full", "cpr", "cpr_mfu", "cpr_ssu", "ecrm", "swift"]
    assert report["smoke dumps"] == "full"  # a scenario loaded before the schema grew
    # a misspelt kind: every kind imported, listed in the registry's order
    valid = ", ".join(repr(info.kind) for info in POLICIES)
    hint = "did you mean 'ecrm'?"
    assert report["typo"] == f"policies.0.kind: unknown kind 'ecrn'; {hint} (valid: {valid})"
    assert report["all"] == KIND_MODULES
    assert "composed" in report["composed"]


def test_the_growth_check_fails_when_the_schema_is_not_rebuilt(tmp_path):
    """Teeth: with the schema completed once and never again, prod50h (naming kinds that smoke
    does not) fails to load after smoke."""
    old = "    if members == _policy_members:"
    root = _planted(tmp_path, "scenario/schema.py", old, "    if _policy_members:")
    done = _python(GROWING, root)
    assert done.returncode != 0
    assert "unknown kind 'cpr'" in done.stderr


def unpickled_kinds(pickled: Path, first: str, package_root: Path = ROOT) -> list[str] | str:
    """In a fresh interpreter: import the catalog and unpickle the scenario at ``pickled``
    (``first`` of the two first), then the kinds of its dump, or the error's line."""
    steps = {
        "catalog": "from ftsim.policies import catalog",
        "scenario": f"s = pickle.loads(open({str(pickled)!r}, 'rb').read())",
    }
    then = "scenario" if first == "catalog" else "catalog"
    code = "\n".join(
        [
            "import json, pickle",
            steps[first],
            steps[then],
            'print(json.dumps([p["kind"] for p in s.model_dump(mode="json")["policies"]]))',
        ]
    )
    done = _python(code, package_root)
    if done.returncode:
        return next(line for line in reversed(done.stderr.splitlines()) if "Error" in line)
    return _printed(done)


@pytest.fixture
def pickled(tmp_path) -> Path:
    path = tmp_path / "prod50h.pickle"
    path.write_bytes(pickle.dumps(scenario("prod50h", "trainer.enabled=false")))
    return path


@pytest.mark.parametrize("first", ["catalog", "scenario"])
def test_an_unpickled_scenario_dumps_whichever_comes_first(pickled, first):
    """A worker of another interpreter (Dask, ``spawn``) or a later session unpickles a
    scenario: its kinds' modules come with it, and the schema accepts them once the catalog
    is imported, before or after."""
    assert unpickled_kinds(pickled, first) == ["full", "cpr", "cpr_mfu", "cpr_ssu", "ecrm", "swift"]


@pytest.mark.parametrize(
    ("first", "file", "line"),
    [
        ("catalog", "scenario/schema.py", "        if registry.has_policy_kinds_provider():"),
        ("scenario", "policies/catalog.py", "if registry.POLICY_PARAMS:"),
    ],
)
def test_the_unpickling_check_fails_without_what_completes_the_schema(
    tmp_path, pickled, first, file, line
):
    """Teeth: without the unpickling's completion (catalog first) or the catalog's own of
    kinds imported before it (scenario first), the dump fails: the schema is incomplete."""
    root = _planted(tmp_path, file, line, line.replace("if ", "if False and "))
    assert "is not fully defined" in unpickled_kinds(pickled, first, root)
