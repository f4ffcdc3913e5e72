"""The generated scenario reference, and the worked example of docs/adding_a_policy.md."""

import re
import sys
import types
import typing

import pytest

from ftsim.cli import main
from ftsim.policies.catalog import policy_params, require
from ftsim.scenario import registry
from ftsim.scenario.reference import GENERATED_BY, scenario_reference
from ftsim.scenario.schema import Scenario
from ftsim.sim.failures import FailureSourceConfig
from tests.conftest import ROOT, SCENARIOS

REFERENCE = ROOT / "docs" / "scenario_reference.md"
ADDING = ROOT / "docs" / "adding_a_policy.md"


def test_committed_reference_is_up_to_date():
    assert REFERENCE.read_text() == scenario_reference(), f"regenerate it: {GENERATED_BY}"


def test_show_reference_prints_it(capsys):
    assert main(["show", "reference"]) == 0
    assert capsys.readouterr().out == scenario_reference()


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_every_section_kind_and_field_is_listed_with_units():
    text = scenario_reference()
    for kind, params in registry.POLICY_PARAMS.items():
        assert f"`policies[]` with `kind: {kind}`" in text
        body = _section(text, f"`policies[]` with `kind: {kind}`")
        for name in params.model_fields:
            assert f"| `{name}` |" in body, (kind, name)
    sources = typing.get_args(typing.get_args(FailureSourceConfig)[0])
    for source in sources:
        kind = typing.get_args(source.model_fields["kind"].annotation)[0]
        assert f"## `failures[]` with `kind: {kind}`" in text
    for name in Scenario.model_fields:
        assert f"| `{name}` |" in _section(text, "Top level")
    assert "| `steps` | integer, ≥ 1, ≤ 1000000 | `1000` |" in _section(text, "`trainer`")
    cluster = _section(text, "`cluster`")
    assert "| `network_latency` | duration, e.g. `'30 min'` | `0 s` |" in cluster
    assert "| `nic_bandwidth` | bandwidth, e.g. `'25 Gbit/s'` | **required** |" in cluster
    job = _section(text, "`job`")
    assert "| `iteration_time` | duration, e.g. `'30 min'` | none |" in job  # Optional[Seconds]
    full = _section(text, "`policies[]` with `kind: full`")
    assert "`young` / `daly` | `daly` |" in full


# -- docs/adding_a_policy.md -----------------------------------------------------------------


def _files(text: str) -> dict[str, str]:
    """Code blocks announced by ``<!-- file: PATH -->``, by path."""
    return dict(re.findall(r"<!-- file: (\S+) -->\n```python\n(.*?)```", text, flags=re.S))


@pytest.fixture
def doc_policy(monkeypatch):
    """The doc's policy module imported as ``ftsim.policies.reinit_shards`` (registering its
    kind, as the catalog's import of it would), and the scenario schema completed with it
    (as for a scenario naming it); the registry and the schema are restored afterwards."""
    code = _files(ADDING.read_text())["ftsim/policies/reinit_shards.py"]
    module = types.ModuleType("ftsim.policies.reinit_shards")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    kinds = dict(registry.POLICY_PARAMS)
    exec(compile(code, f"{ADDING} (ftsim/policies/reinit_shards.py)", "exec"), vars(module))
    require({"reinit_shards"})
    yield module
    registry.POLICY_PARAMS.clear()
    registry.POLICY_PARAMS.update(kinds)
    policy_params()  # the schema of the catalog's own kinds again


def test_the_worked_example_and_its_tests_run_as_written(doc_policy):
    assert registry.POLICY_PARAMS["reinit_shards"].plan_class is doc_policy.ReinitShardsPlan
    assert list(policy_params())[-1] == "reinit_shards"  # after the catalog's own kinds
    code = _files(ADDING.read_text())["tests/test_reinit_shards.py"]
    namespace: dict = {"__name__": "test_reinit_shards"}
    exec(compile(code, f"{ADDING} (tests/test_reinit_shards.py)", "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert len(tests) == 5
    for test in tests:
        test()


def test_advise_evaluates_a_policy_without_knobs_as_set(doc_policy, tmp_path):
    """A new user's advice on the doc's policy, which has no interval, crashed in the
    frontier figure (KeyError: 'n'): every candidate set an interval it lacks. A policy
    with no knob is evaluated once, as set, and its frontier drawn."""
    import matplotlib.pyplot as plt

    from ftsim.experiments import advise

    scenario = SCENARIOS / "smoke.yaml"
    only = ["policies=[{kind: reinit_shards, penalty: 3 min}]"]
    advice = advise.execute(scenario, only, tmp_path / "a", reps=2)
    [policy] = advice.policies
    assert policy.knobs == [] and len(policy.candidates) == 1
    assert advice.picks.loc[0, "setting"] == "as set (no knob to search)"
    assert advice.recommendation is policy
    plt.close(advice.figure())


def test_the_doc_names_the_real_hooks_helpers_and_events(smoke):
    from ftsim.experiments.prepare import prepare
    from ftsim.policies.base import Plan, Policy, TrainerSide
    from ftsim.policies.events import ModelEvent

    text = ADDING.read_text()
    for hook in re.findall(r"^\| `(\w+)\(", text, flags=re.M):
        assert any(hasattr(cls, hook) for cls in (Policy, Plan, TrainerSide)), hook
    sim = prepare(smoke, 0).replicate(0)
    for helper in re.findall(r"`sim\.(\w+)", text):
        assert hasattr(sim, helper), helper
    section = text.split("## 4.")[1].split("## 5.")[0]
    events = set()  # the shared ones: a new policy's own events need not be in the guide
    pending = list(ModelEvent.__subclasses__())
    while pending:
        cls = pending.pop()
        if cls.__module__ == ModelEvent.__module__:
            events.add(cls.__name__)
        pending += cls.__subclasses__()
    mentioned = set(re.findall(r"`([A-Z]\w+)`", section))
    missing = events - mentioned
    assert not missing, f"docs/adding_a_policy.md, section 4, does not name {sorted(missing)}"
