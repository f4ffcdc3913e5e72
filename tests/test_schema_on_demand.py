"""The scenario schema on demand (issue 26, start-up): a scenario imports the modules of the
policy kinds it names, and the trainer's config only if it has a ``trainer:`` section; the
schema grows as scenarios name more, and whatever reads it for a scenario's mapping (its
validation, the renaming of old field names, an override's walk) finds the sections the
mapping names.

Each check runs in a fresh interpreter (the test session's conftest imports every kind, which
would hide what a process imports on its own); the teeth tests plant a bug in a copy of the
package and see the check fail.
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
report["smoke trainer"] = "ftsim.trainer.config" in sys.modules
prod = load_scenario("{scenarios}/prod50h.yaml")
report["prod50h"] = kinds()
report["prod50h trainer"] = "ftsim.trainer.config" in sys.modules
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
    assert (report["smoke trainer"], report["prod50h trainer"]) == (False, True)
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
    (``first`` of the two first), then the kinds of its dump, or the error output."""
    steps = {
        "catalog": "from ftsim.policies import catalog",
        "scenario": f"s = pickle.loads(pathlib.Path({str(pickled)!r}).read_bytes())",
    }
    then = "scenario" if first == "catalog" else "catalog"
    code = "\n".join(
        [
            "import json, pathlib, pickle, warnings",
            'warnings.simplefilter("error")  # a value of a type its field does not accept',
            steps[first],
            steps[then],
            'print(json.dumps([p["kind"] for p in s.model_dump(mode="json")["policies"]]))',
        ]
    )
    done = _python(code, package_root)
    return done.stderr if done.returncode else _printed(done)


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
    ("first", "file", "line", "error"),
    [
        (
            "catalog",
            "scenario/schema.py",
            "        if registry.has_policy_kinds_provider():",
            "is not fully defined",
        ),
        ("scenario", "policies/catalog.py", "if registry.POLICY_PARAMS:", "is not fully defined"),
        ("catalog", "scenario/schema.py", "        if self.trainer is not None:", "serializ"),
    ],
)
def test_the_unpickling_check_fails_without_what_completes_the_schema(
    tmp_path, pickled, first, file, line, error
):
    """Teeth: without the unpickling's completion (catalog first: kinds, trainer section) or
    the catalog's own of kinds imported before it (scenario first), the dump fails: the
    schema is incomplete, or its trainer field refuses the section."""
    root = _planted(tmp_path, file, line, line.replace("if ", "if False and "))
    assert error in unpickled_kinds(pickled, first, root).lower()


OLD_NAMES = """\
name: old_names
job: {tables: [{rows: 1000, dim: 16, count: 2}], dense_params: 1000,
      samples_per_iteration: 1024, iteration_time: 50 ms, training: 4 h}
cluster: {trainers: 2, emb_ps: 4, nic_bandwidth: 10 Gbit/s,
          storage: {write_bandwidth: 1 GB/s, read_bandwidth: 2 GB/s},
          reschedule: {kind: constant, mean: 1 min}}
failures: [{kind: exponential, role: any, job_mtbf: 1 h}]
policies:
  - {kind: swift, checkpoint_interval: 2 h}   # the old name of interval
  - {kind: ecrm, k: 2, r: 1, interval: 2 h}
"""
"""A scenario naming kinds with an old field name, read before any kind is imported."""

READS = {
    # the old name renamed as the file is read (located), then the wildcard sets interval
    "wildcard": ["--set", "policies.*.interval=3 h"],
    # an override's walk checks the key against the kind's fields
    "typo": ["--set", "policies.1.layuot=grouped"],
    # the renamed interval is a field of the kind the policy becomes
    "new kind": ["--set", "policies.0.kind=cpr", "--set", "policies.0.target_pls=0.1"],
}


def show_config(tmp_path: Path, case: str, package_root: Path = ROOT):
    """``ftsim show config`` of :data:`OLD_NAMES` with the overrides of ``case``, in a fresh
    interpreter: (exit status, standard output, standard error)."""
    path = tmp_path / "old_names.yaml"
    path.write_text(OLD_NAMES)
    argv = ["show", "config", str(path), *READS[case]]
    done = _python(
        f"import sys; from ftsim.cli import main; sys.exit(main({argv!r}))", package_root
    )
    return done.returncode, done.stdout, done.stderr.replace(f"{path}: ", "")


def reading_problems(tmp_path: Path, package_root: Path = ROOT) -> list[str]:
    """What goes wrong reading :data:`OLD_NAMES` with each case of :data:`READS` (nothing
    when every step that reads the schema finds the kinds the data names)."""
    found = []
    status, out, err = show_config(tmp_path, "wildcard", package_root)
    if "policies.0.checkpoint_interval is deprecated: call it interval" not in err:
        found.append(f"wildcard: the old name not renamed as the file is read: {err}")
    if status != 0 or out.count("interval: 3 h") != 2:
        found.append(f"wildcard: {status} {err}")
    status, _, err = show_config(tmp_path, "typo", package_root)
    if "policies.1.layuot: unknown key 'layuot'; did you mean 'layout'?" not in err:
        found.append(f"typo: {status} {err}")
    status, out, err = show_config(tmp_path, "new kind", package_root)
    if status != 0 or "kind: cpr" not in out or "interval: 2 h" not in out:
        found.append(f"new kind: {status} {err}")
    return found


def test_old_names_and_overrides_see_the_kinds_the_data_names(tmp_path):
    assert reading_problems(tmp_path) == []


@pytest.mark.parametrize(
    "line", ["accept_named(data)  # the walk", "accept_named(node)  # the old names"]
)
def test_the_reading_check_fails_when_a_walk_does_not_ask_for_the_kinds(tmp_path, line):
    """Teeth: an override's walk without the kinds the data names (the policy that becomes a
    ``cpr`` has no ``target_pls`` for the walk), or the renaming of old names without them
    (the old name is not renamed, nor warned about, as the file is read)."""
    root = _planted(tmp_path, "scenario/overrides.py", line, line.replace("accept_named", "print"))
    assert reading_problems(tmp_path, root)


_THREADS = """
import json, threading
from ftsim.policies import catalog
from ftsim.scenario import registry, schema
from ftsim.scenario.loader import load_scenario

# Two threads load scenarios at once; the first is held inside the schema's growth where a
# race would show, until the second is where it would see it (1 s at most: with the lock, the
# second waits for the first instead, and the first goes on after that second).
held, second_there, first_grown = threading.Event(), threading.Event(), threading.Event()

def hold_first():
    if threading.current_thread().name == "first":
        held.set()
        second_there.wait(1)

if {case!r} == "kinds":
    # the first has made its union (full, cpr) when the second names ecrm: the second's
    # rebuild comes first, then the first's drops ecrm before the second validates
    loads = [("smoke.yaml", ["policies.0.kind=cpr"]), ("smoke.yaml", ["policies.0.kind=ecrm"])]
    made, required = registry.discriminated, registry.require_policy_kinds
    def slowed(table, *rest):
        union = made(table, *rest)
        if "cpr" in table:
            hold_first()
        return union
    def asked(kinds):
        required(kinds)
        if "cpr" in kinds and threading.current_thread().name == "first":
            first_grown.set()
        if "ecrm" in kinds and threading.current_thread().name == "second":
            second_there.set()
            first_grown.wait(1)
    registry.discriminated, registry.require_policy_kinds = slowed, asked
else:
    # the first is about to rebuild the schema for its trainer section; the second, with a
    # section too, must not validate against the schema before that rebuild
    loads = [("prod50h.yaml", []), ("prod50h.yaml", ["trainer.steps=6"])]
    load_scenario("{scenarios}/smoke.yaml")  # the schema complete, without the section
    retype = schema._retype
    def slowed(field, annotation):
        if field == "trainer":
            hold_first()
        retype(field, annotation)
    schema._retype = slowed

errors = []
def load(name, file, overrides):
    try:
        load_scenario("{scenarios}/" + file, overrides)
    except Exception as exc:
        errors.append(f"{{name}}: {{exc}}")
    if name == "second":
        second_there.set()

first = threading.Thread(target=load, name="first", args=("first", *loads[0]))
first.start()
held.wait(5)
second = threading.Thread(target=load, name="second", args=("second", *loads[1]))
second.start()
first.join()
second.join()
print(json.dumps(errors))
"""


@pytest.mark.parametrize("case", ["kinds", "trainer"])
def test_threads_loading_at_once_each_find_what_they_name(case):
    """A notebook's threads, or a Dask worker's, load scenarios naming different kinds (or a
    trainer section) at once: the schema grows for each under one lock."""
    code = _THREADS.format(case=case, scenarios=SCENARIOS)
    assert _printed(_python(code)) == []


@pytest.mark.parametrize("case", ["kinds", "trainer"])
def test_the_threads_check_fails_without_the_lock(tmp_path, case):
    """Teeth: without the lock, the first thread's stale union is rebuilt last (ecrm unknown
    to the second) or the second validates a trainer section before the first's rebuild."""
    old = "GROWING = threading.RLock()"
    root = _planted(
        tmp_path, "scenario/schema.py", old, 'GROWING = __import__("contextlib").nullcontext()'
    )
    if case == "trainer":  # the section's model set before the rebuild, as it was
        schema = root / "ftsim" / "scenario" / "schema.py"
        text = schema.read_text()
        moved = "        _trainer_section = TrainerSection  # set last"
        assert moved in text
        text = text.replace(moved, "        pass  # set last")
        first = '        if Scenario.__pydantic_complete__:\n            _retype("trainer"'
        assert first in text
        text = text.replace(first, "        _trainer_section = TrainerSection\n" + first)
        schema.write_text(text)
    errors = _printed(_python(_THREADS.format(case=case, scenarios=SCENARIOS), root))
    expected = "unknown kind 'ecrm'" if case == "kinds" else "trainer"
    assert len(errors) == 1 and errors[0].startswith("second: ") and expected in errors[0], errors
