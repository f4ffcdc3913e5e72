"""Bad and doubtful input by class, in-process: each test runs over every member of its
class, found by introspecting the models (every bounded field of every policy, plain and as
a part of a composed policy; every bandwidth; every quantity), so a field added later is
covered without a new line here. ``tests/test_bad_inputs.py`` drives the command line.
"""

from __future__ import annotations

import copy
import csv
import math
import re
import warnings

import annotated_types
import pytest
import yaml
from pydantic import BaseModel, PlainSerializer

from ftsim.experiments.runner import simulate
from ftsim.policies.catalog import policy_params
from ftsim.scenario import schema
from ftsim.scenario.loader import ScenarioError, config_hash, read_yaml, validate_scenario
from ftsim.scenario.notices import NO_EFFECT, ScenarioWarning, resolved_data
from ftsim.scenario.units import format_bandwidth, format_duration
from ftsim.sim import failures
from ftsim.sim.failure_log import LogError, read_failure_log
from tests.conftest import SCENARIOS

SMOKE = SCENARIOS / "smoke.yaml"
BASE = {k: v for k, v in read_yaml(SMOKE).items() if k != "trainer"}

PLAIN = {
    "cpr": {"target_pls": 0.1},
    "cpr_mfu": {"target_pls": 0.1},
    "cpr_ssu": {"target_pls": 0.1},
}
"""What a policy kind needs besides ``kind`` to be valid on its own."""

AS_PART = {
    **{
        kind: ({"shards": [0, 1]}, {"target_pls": 0.1, "fallback": False})
        for kind in ("cpr", "cpr_mfu", "cpr_ssu")
    },
    "swift": ({"shards": [0, 1]}, {}),
    "checknrun": ({"shards": [0, 1]}, {"recovery": "partial"}),
    "ecrm": ({"hottest": 0.05}, {"fallback": "partial", "k": 1}),
}
"""The kinds a composed policy's part may use: its scope and what the policy then needs."""

KINDS = [kind for kind in policy_params() if kind != "composed"]


def scenario_with(policy: dict, **changes) -> dict:
    data = copy.deepcopy(BASE)
    data["policies"] = [policy]
    for key, value in changes.items():
        data[key] = value
    return data


def plain(kind: str, **fields) -> dict:
    return {"kind": kind, **PLAIN.get(kind, {}), **fields}


def composed(kind: str, **fields) -> dict:
    scope, needs = AS_PART[kind]
    rest = {"kind": "cpr", "target_pls": 0.1, "fallback": False, "trainer_failure": "replica"}
    return {
        "kind": "composed",
        "parts": [
            {"scope": scope, "name": "part", "policy": {"kind": kind, **needs, **fields}},
            {"scope": "rest", "policy": rest},
        ],
    }


def problems(data: dict) -> list[str]:
    """The ``path: message`` lines of the scenario's error (none if it loads)."""
    try:
        validate_scenario(data, SMOKE, warn=False)
    except ScenarioError as error:
        return [f"{path}: {message}" for path, message in error.problems]
    return []


def loads_with_warnings(data: dict) -> list[str]:
    """The ``path: message`` of every warning of a valid scenario."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        validate_scenario(data, SMOKE)
    return [f"{w.message.path}: {w.message.message}" for w in caught]


# -- the classes, by introspection -----------------------------------------------------------


def _serializer(field) -> object | None:
    """The unit formatter of a quantity field (Seconds, Bytes, BytesPerSecond), or None."""
    found = [m.func for m in field.metadata if isinstance(m, PlainSerializer)]
    inner = [field.annotation]
    while inner:
        tp = inner.pop()
        found += [m.func for m in getattr(tp, "__metadata__", ()) if isinstance(m, PlainSerializer)]
        inner += list(getattr(tp, "__args__", ()))
    return found[0] if found else None


def _violations(field) -> list[tuple[str, object]]:
    """(name of the bound, a value just beyond it) for every bound of ``field``."""
    duration = _serializer(field) is format_duration
    whole = field.annotation is int
    out = []
    for bound in field.metadata:
        if isinstance(bound, annotated_types.Gt):
            out.append((f"gt{bound.gt}", f"{bound.gt} s" if duration else bound.gt))
        elif isinstance(bound, annotated_types.Ge):
            below = bound.ge - 1 if whole else bound.ge - 0.5
            out.append((f"ge{bound.ge}", f"{below} s" if duration else below))
        elif isinstance(bound, annotated_types.Lt):
            out.append((f"lt{bound.lt}", bound.lt))
        elif isinstance(bound, annotated_types.Le):
            out.append((f"le{bound.le}", bound.le + 1))
    return out


BOUNDED = [
    (kind, name, label, value)
    for kind in KINDS
    for name, field in policy_params()[kind].model_fields.items()
    for label, value in _violations(field)
]
"""Every bound of every field of every policy (except composed's own), with a value beyond."""


def _ids(cases):
    return ["-".join(map(str, case[:3])) for case in cases]


@pytest.mark.parametrize(("kind", "name", "bound", "value"), BOUNDED, ids=_ids(BOUNDED))
def test_a_value_beyond_a_policy_fields_bound_is_a_located_error(kind, name, bound, value):
    found = problems(scenario_with(plain(kind, **{name: value})))
    assert any(line.startswith(f"policies.0.{name}: Input should be") for line in found), found


IN_PARTS = [case for case in BOUNDED if case[0] in AS_PART]


@pytest.mark.parametrize(("kind", "name", "bound", "value"), IN_PARTS, ids=_ids(IN_PARTS))
def test_a_composed_part_gives_the_plain_policys_located_error(kind, name, bound, value):
    """The same value in a part of a composed policy: the same message, at the part's path."""
    alone = problems(scenario_with(plain(kind, **{name: value})))
    inside = problems(scenario_with(composed(kind, **{name: value})))
    here = f"policies.0.{name}: "
    expected = {line.removeprefix(here) for line in alone if line.startswith(here)}
    there = f"policies.0.parts.0.policy.{name}: "
    assert expected and expected <= {line.removeprefix(there) for line in inside}, inside


def _quantity_fields(model: type[BaseModel], formatter) -> list[str]:
    return [n for n, f in model.model_fields.items() if _serializer(f) is formatter]


SECTIONS = {
    "cluster": schema.Cluster,
    "cluster.storage": schema.Storage,
    "job": schema.Job,
    "cluster.reschedule": schema.Distribution,
}
"""Scenario sections at fixed paths of smoke.yaml."""

BANDWIDTHS = [
    *(
        (where, kind, name)
        for kind in KINDS
        for name in _quantity_fields(policy_params()[kind], format_bandwidth)
        for where in ("plain", "part")
        if where == "plain" or kind in AS_PART
    ),
    *(
        ("section", path, name)
        for path, model in SECTIONS.items()
        for name in _quantity_fields(model, format_bandwidth)
    ),
]
"""Every bandwidth of the scenario: each policy's (alone and as a part), the cluster's."""


def _set(where: str, owner: str, name: str, value) -> tuple[dict, str]:
    """The smoke scenario with field ``name`` of a policy kind (``owner``, alone or as a
    part) or of a section (``owner`` its path) set to ``value``, and that field's path."""
    if where == "plain":
        return scenario_with(plain(owner, **{name: value})), f"policies.0.{name}"
    if where == "part":
        return scenario_with(composed(owner, **{name: value})), f"policies.0.parts.0.policy.{name}"
    data = copy.deepcopy(BASE)
    node = data
    for key in owner.split("."):
        node = node[key]
    node[name] = value
    if owner == "cluster.reschedule" and name in ("low", "high"):
        node.update({"kind": "uniform", "low": "1 s", "high": "2 s", name: value})
        node.pop("mean")
    return data, f"{owner}.{name}"


@pytest.mark.parametrize("zero", ["0 GB/s", "0 Gbit/s", 0])
@pytest.mark.parametrize(("where", "owner", "name"), BANDWIDTHS, ids=_ids(BANDWIDTHS))
def test_a_zero_bandwidth_is_a_located_error_at_load_time(where, owner, name, zero):
    data, path = _set(where, owner, name, zero)
    found = problems(data)
    assert any(p.startswith(f"{path}: must be positive: a zero bandwidth") for p in found), found


QUANTITIES = [
    *(
        ("plain", kind, name)
        for kind in KINDS
        for name in policy_params()[kind].model_fields
        if _serializer(policy_params()[kind].model_fields[name])
    ),
    *(
        ("section", path, name)
        for path, model in SECTIONS.items()
        for name, field in model.model_fields.items()
        if _serializer(field)
    ),
]
"""Every quantity with a unit (duration, size, bandwidth) of every policy and section."""


@pytest.mark.parametrize(("where", "owner", "name"), QUANTITIES, ids=_ids(QUANTITIES))
def test_yaml_nan_or_inf_for_a_quantity_says_not_a_number_or_infinite(where, owner, name):
    data, path = _set(where, owner, name, math.nan)
    assert any(p.startswith(f"{path}: is not a number (NaN)") for p in problems(data))
    data, path = _set(where, owner, name, -math.inf)
    assert any(p.startswith(f"{path}: is infinite") for p in problems(data))


# -- zeros and extremes in derived plans -------------------------------------------------------


def _numbers(value, path: str = "") -> list[str]:
    """Dotted paths of every field of a validated scenario holding a number (not a yes/no)."""
    if isinstance(value, BaseModel):
        return [
            found
            for name in type(value).model_fields
            for found in _numbers(getattr(value, name), f"{path}.{name}" if path else name)
        ]
    if isinstance(value, list | tuple):
        return [found for i, item in enumerate(value) for found in _numbers(item, f"{path}.{i}")]
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    return [path] if is_number else []


def _number_cases() -> list[tuple[dict, str]]:
    """(resolved scenario, path of a number in it) for every number field of the base
    scenario and of a plain policy of each kind, with a trainer section."""
    cases = []
    for kind in KINDS:
        data = scenario_with(plain(kind), trainer={"enabled": False})
        s = validate_scenario(data, SMOKE, warn=False)
        paths = _numbers(s) if kind == KINDS[0] else _numbers(s.policies, "policies")
        cases += [(s.model_dump(mode="json"), path) for path in paths]
    return cases


NUMBER_CASES = _number_cases()


@pytest.mark.parametrize(("data", "path"), NUMBER_CASES, ids=[p for _, p in NUMBER_CASES])
def test_a_yes_no_where_a_number_is_expected_is_a_located_error(data, path):
    """YAML's ``true``/``yes`` for any number (``replications: yes`` ran one replication) is
    refused, located at the field (or its section, when the section's own check sees the
    1 it reads as first)."""
    data = copy.deepcopy(data)
    *parents, name = path.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[int(name) if isinstance(node, list) else name] = True
    found = problems(data)
    assert found and path.startswith(found[0].split(": ")[0]), found


@pytest.mark.parametrize("where", ["plain", "part"])
@pytest.mark.parametrize("kind", ["cpr", "cpr_mfu", "cpr_ssu", "checknrun"])
def test_a_tiny_target_pls_is_refused_by_the_event_budget_alone_or_in_a_part(kind, where):
    """The interval a target PLS sets counts toward the event budget, also in a part
    (before, a part's 1e-9 ran for minutes)."""
    extra = {"recovery": "partial", "interval": None} if kind == "checknrun" else {}
    policy = (plain if where == "plain" else composed)(kind, target_pls=1e-9, **extra)
    path = "policies.0.target_pls" if where == "plain" else "policies.0.parts.0.policy.target_pls"
    found = problems(scenario_with(policy))
    assert any(line.startswith(f"{path}: a replication would simulate") for line in found), found


def test_a_huge_baseline_period_plans_only_the_runs_checkpoints():
    """Check-N-Run's planned costs walk one baseline cycle: never longer than the run."""
    from ftsim.policies.checknrun import CheckNRun

    for every, expected in [(4, 4), (10**15, 8)]:  # smoke: 4 h at 30 min = 8 checkpoints
        data = scenario_with(plain("checknrun", interval="30 min", baseline_every=every))
        s = validate_scenario(data, SMOKE)
        sim = simulate(s, 0, 0)
        assert isinstance(sim.policy, CheckNRun)
        assert sum(1 for _ in sim.policy.plan._cycle(1800.0)) == expected
        assert sim.completed


@pytest.mark.parametrize("where", ["plain", "part"])
def test_more_replay_machines_than_embedding_ps_is_refused(where):
    policy = (plain if where == "plain" else composed)("swift", replay_machines=10**15)
    path = "policies.0.replay_machines" if where == "plain" else "policies.0.parts.0.policy"
    found = problems(scenario_with(policy))
    assert any(line.startswith(path) and "embedding PS" in line for line in found), found


def test_a_zipf_exponent_above_the_bound_is_refused_everywhere():
    for kind in ("cpr_mfu", "checknrun", "ecrm", "swift"):
        field = "popularity_exponent"
        assert any(
            f"policies.0.{field}: Input should be less" in p
            for p in problems(scenario_with(plain(kind, **{field: 1e300})))
        )


# -- warnings: values that do nothing -----------------------------------------------------------

NO_EFFECT_CASES = {
    ("CheckNRunParams", "quantization"): (
        plain("checknrun", quantization="uniform"),
        plain("checknrun", quantization="uniform", quantize_bits=8),
    ),
    # one rule for every policy that reads the Zipf exponent (the trainer's data, when
    # present, sets it: test_popularity_exponent_without_effect_when_the_trainer_sets_it)
    ("PopularityParams", "popularity_exponent"): (
        plain("swift", popularity_exponent=1.2),
        plain("swift", popularity_exponent=1.2, unique_lookup_fraction="zipf"),
    ),
    ("CprParams", "pls_slope"): (
        plain("cpr", pls_slope=0.5),
        {"kind": "cpr", "target_accuracy_loss": 0.01, "pls_slope": 0.5},
    ),
    ("SavingParams", "snapshot_bandwidth"): (
        plain("full", snapshot_bandwidth="1 GB/s"),
        plain("full", snapshot_bandwidth="1 GB/s", save_mode="checkfreq"),
    ),
    ("SavingParams", "persist_slowdown"): (
        plain("full", persist_slowdown=0.1),
        plain("full", persist_slowdown=0.1, save_mode="checkfreq"),
    ),
    ("SwiftParams", "unlogged"): (
        plain("swift", unlogged="drop"),
        plain("swift", unlogged="drop", log_budget=0.5),
    ),
}
"""Per rule of ``NO_EFFECT`` on a policy: a policy where the field does nothing, and one
where it does (None: covered by its own test)."""

SOURCE_CASES = {
    ("Distribution", "cv"): ({"kind": "exponential", "mean": "1 min", "cv": 0.5}, None),
    ("Distribution", "mean"): (
        {"kind": "uniform", "low": "1 s", "high": "2 s", "mean": "1 s"},
        None,
    ),
    ("Distribution", "low"): ({"kind": "constant", "mean": "1 s", "low": "1 s"}, None),
    ("Distribution", "high"): ({"kind": "constant", "mean": "1 s", "high": "1 s"}, None),
    **{
        ("ScheduledFailures", name): (None, {"kind": "scheduled", "times": ["1 h"], name: value})
        for name, value in (("spacing", "even"), ("start", "1 s"), ("end", "2 h"))
    },
    **{
        ("ScheduledFailures", name): (
            None,
            {"kind": "scheduled", "times": ["1 h"], "nodes": [["emb_ps0"]], name: value},
        )
        for name, value in (("role", "trainer"), ("nodes_per_failure", 2))
    },
    ("FailureLogFailures", "mapping"): None,
    ("FailureLogFailures", "role"): None,
}
"""Rules on sections: (cluster.reschedule, failures.0) where the field does nothing."""


SCHEDULED = [{"kind": "scheduled", "count": 2}]
BAD = {"share": 0.1, "multiplier": 3}
OPERATIONS_CASES = {
    ("Operations", "swap"): (
        ({"spares": 1, "swap": {"mean": "1 min"}}, None),
        ({"spares": 1, "warm_standbys": 1, "swap": {"mean": "1 min"}}, None),
    ),
    ("Operations", "host_selection"): (
        ({"spares": "unlimited", "host_selection": "fewest_failures"}, None),
        ({"spares": 2, "host_selection": "fewest_failures"}, None),
    ),
    ("Operations", "bad_nodes"): (({"spares": 1, "bad_nodes": BAD}, SCHEDULED), None),
    ("Repair", "manual"): (
        ({"spares": 1, "repair": {"escalation": 0, "manual": {"mean": "1 d"}}}, None),
        ({"spares": 1, "repair": {"manual": {"mean": "1 d"}}}, None),
    ),
    **{
        ("Repair", name): (
            ({"spares": 1, "repair": {name: 0.1}}, None),
            ({"spares": 1, "repair": {name: 0.1}, "bad_nodes": BAD}, None),
        )
        for name in ("automatic_miss", "manual_miss")
    },
}
"""Rules on ``cluster.operations``: (operations, failures or None for smoke's) where the
field does nothing, and where it does (None: smoke's failures all have per-node rates)."""


def test_every_no_effect_rule_has_a_case():
    rules = {(cls.__name__, name) for cls, name, _ in NO_EFFECT}
    assert rules == set(NO_EFFECT_CASES) | set(SOURCE_CASES) | set(OPERATIONS_CASES)


def _with_operations(operations: dict, failures: list | None = None) -> dict:
    data = copy.deepcopy(BASE)
    data["cluster"]["operations"] = operations
    if failures is not None:
        data["failures"] = failures
    return data


@pytest.mark.parametrize(
    ("rule", "case"), OPERATIONS_CASES.items(), ids=[f"{c}.{n}" for c, n in OPERATIONS_CASES]
)
def test_an_operations_field_without_effect_warns_naming_it(rule, case):
    idle, used = case
    section = "cluster.operations.repair" if rule[0] == "Repair" else "cluster.operations"
    path = f"{section}.{rule[1]}: "
    assert any(
        w.startswith(path + "has no effect: ") for w in loads_with_warnings(_with_operations(*idle))
    )
    if used is not None:
        assert not any(w.startswith(path) for w in loads_with_warnings(_with_operations(*used)))


OPERATIONS_SECTIONS = {
    "cluster.operations": schema.Operations,
    "cluster.operations.repair": schema.Repair,
    "cluster.operations.bad_nodes": schema.BadNodes,
    "cluster.operations.retirement": schema.Retirement,
}
VALID_OPERATIONS = {
    "spares": 1,
    "repair": {},
    "bad_nodes": BAD,
    "retirement": {"failures": 2, "window": "1 d"},
}
OPERATIONS_BOUNDED = [
    (path, name, label, value)
    for path, model in OPERATIONS_SECTIONS.items()
    for name, field in model.model_fields.items()
    for label, value in _violations(field)
]
"""Every bound of every field of the operations sections, with a value beyond."""


def _operations_with(path: str, name: str, value) -> dict:
    operations = copy.deepcopy(VALID_OPERATIONS)
    node = operations
    for key in path.split(".")[2:]:
        node = node[key]
    node[name] = value
    return _with_operations(operations)


@pytest.mark.parametrize(
    ("path", "name", "bound", "value"), OPERATIONS_BOUNDED, ids=_ids(OPERATIONS_BOUNDED)
)
def test_a_value_beyond_an_operations_fields_bound_is_a_located_error(path, name, bound, value):
    found = problems(_operations_with(path, name, value))
    assert any(line.startswith(f"{path}.{name}: Input should be") for line in found), found


@pytest.mark.parametrize("value", [-1, 1.5, "many", True, "1e400"])
def test_a_bad_spare_count_is_a_located_error(value):
    found = problems(_operations_with("cluster.operations", "spares", value))
    assert any(line.startswith("cluster.operations.spares: ") for line in found), found


@pytest.mark.parametrize("value", ["0 s", 0, "-1 h", math.nan, 1])
def test_a_bad_retirement_window_is_a_located_error(value):
    found = problems(_operations_with("cluster.operations.retirement", "window", value))
    assert any(line.startswith("cluster.operations.retirement.window: ") for line in found)


POLICY_RULES = [(key, case) for key, case in NO_EFFECT_CASES.items() if case]


@pytest.mark.parametrize(
    ("rule", "case"), POLICY_RULES, ids=[f"{c}.{n}" for (c, n), _ in POLICY_RULES]
)
def test_a_policy_field_without_effect_warns_naming_it(rule, case):
    name = rule[1]
    idle, used = case
    found = loads_with_warnings(scenario_with(idle))
    assert any(re.match(rf"policies\.0\.{name}: has no effect: ", w) for w in found), found
    assert not any(
        w.startswith(f"policies.0.{name}:") for w in loads_with_warnings(scenario_with(used))
    )


def test_a_composed_zipf_exponent_without_effect_warns_naming_it():
    """The same rule through a composed policy: its parts decide whether the exponent is
    read (SWIFT's unique-lookup fraction is not a Zipf one; ECRM's hot rows are)."""
    idle = {**composed("swift"), "popularity_exponent": 1.2}
    used = {**composed("ecrm"), "popularity_exponent": 1.2}
    found = loads_with_warnings(scenario_with(idle))
    assert any(re.match(r"policies\.0\.popularity_exponent: has no effect: ", w) for w in found)
    assert not any(
        w.startswith("policies.0.popularity_exponent:")
        for w in loads_with_warnings(scenario_with(used))
    )


SECTION_RULES = [(key, case) for key, case in SOURCE_CASES.items() if case]


@pytest.mark.parametrize(
    ("rule", "case"), SECTION_RULES, ids=[f"{c}.{n}" for (c, n), _ in SECTION_RULES]
)
def test_a_section_field_without_effect_warns_naming_it(rule, case):
    reschedule, source = case
    data = copy.deepcopy(BASE)
    if reschedule:
        data["cluster"]["reschedule"] = reschedule
        path = f"cluster.reschedule.{rule[1]}"
    else:
        data["failures"] = [source]
        path = f"failures.0.{rule[1]}"
    assert any(w.startswith(f"{path}: has no effect: ") for w in loads_with_warnings(data))


def _idle_cases() -> list[tuple[str, dict, str]]:
    """(rule, scenario giving the field where it does nothing, dotted path of the field),
    for every rule with a case above; the scenario also plans with the failure rate (a
    full policy at Daly's interval), through which a field may act unseen."""
    daly = {"kind": "full", "name": "at_daly", "interval": "daly"}
    cases = []
    for (cls, name), case in [*NO_EFFECT_CASES.items(), *SOURCE_CASES.items()]:
        if not case:
            continue
        data = copy.deepcopy(BASE)
        if (cls, name) in NO_EFFECT_CASES:
            data["policies"], path = [case[0], daly], f"policies.0.{name}"
        elif case[0] is not None:
            data["cluster"]["reschedule"], path = case[0], f"cluster.reschedule.{name}"
        else:
            data["failures"], path = [case[1]], f"failures.0.{name}"
            data["policies"] = [*data["policies"], daly]
        cases.append((f"{cls}.{name}", data, path))
    return cases


IDLE_CASES = _idle_cases()


@pytest.mark.parametrize(("rule", "data", "path"), IDLE_CASES, ids=[c[0] for c in IDLE_CASES])
def test_a_field_said_to_have_no_effect_has_none_and_is_not_written_back(rule, data, path):
    """The warning's claim holds: the scenario simulates the same rows without the field
    (``end`` with given ``times`` changed the job MTBF that Daly's interval plans with);
    the resolved scenario a run folder gets leaves it out, reads back without a warning,
    and has the config hash of the scenario without it."""
    *parents, name = path.split(".")
    without = copy.deepcopy(data)
    node = without
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    del node[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScenarioWarning)
        given, plain_ = validate_scenario(data, SMOKE), validate_scenario(without, SMOKE)
    for index in range(len(given.policies)):
        assert simulate(given, index, 0).row() == simulate(plain_, index, 0).row()
    written = resolved_data(given)
    assert config_hash(given) == config_hash(plain_)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ScenarioWarning)
        again = validate_scenario(yaml.safe_load(yaml.safe_dump(written)), SMOKE)
    assert config_hash(again) == config_hash(given)


def test_popularity_exponent_without_effect_when_the_trainer_sets_it():
    data = scenario_with(plain("checknrun", popularity_exponent=1.2))
    assert not loads_with_warnings(data)
    data["trainer"] = {"enabled": False, "data": {"kind": "synthetic"}}
    found = loads_with_warnings(data)
    assert found == [
        "policies.0.popularity_exponent: has no effect: the trainer's synthetic data sets the "
        "row popularity (trainer.data.zipf_exponent)"
    ]


def test_a_sweep_over_a_context_does_not_warn_about_its_template():
    """swift_logging sweeps log_budget: unlogged: drop has an effect at some points."""
    data = read_yaml(SCENARIOS / "swift_logging.yaml")
    assert not loads_with_warnings(data)
    data.pop("sweep")
    assert "policies.1.unlogged: has no effect: log_budget is 1: every update is logged" in (
        loads_with_warnings(data)
    )


@pytest.mark.parametrize("name", sorted(p.stem for p in SCENARIOS.glob("*.yaml")))
def test_the_committed_scenarios_have_no_warnings_nor_their_resolved_copies(name):
    """A resolved scenario (a run folder's scenario.yaml) spells out every default: a
    default or null value is not one the author gave, and warns about nothing."""
    path = SCENARIOS / f"{name}.yaml"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ScenarioWarning)
        resolved = validate_scenario(read_yaml(path), path).model_dump(mode="json")
        validate_scenario(resolved, path)


# -- failures after the horizon; no failures at all ---------------------------------------------


@pytest.mark.parametrize(
    ("source", "path", "words"),
    [
        ({"kind": "scheduled", "times": ["1 h", "5 h"]}, "failures.0.times.1", "5 h is after the"),
        ({"kind": "scheduled", "times": ["1000 h"]}, "failures.0.times.0", "never simulated"),
        ({"kind": "scheduled", "count": 3, "end": "6 h"}, "failures.0.end", "drawn up to it"),
    ],
)
def test_scheduled_failures_after_the_training_warn_naming_the_field(source, path, words):
    data = copy.deepcopy(BASE)
    data["failures"] = [source]
    found = loads_with_warnings(data)
    assert any(w.startswith(f"{path}: ") and words in w for w in found), found


def _trace(tmp_path, text: str) -> dict:
    (tmp_path / "t.csv").write_text(text)
    data = copy.deepcopy(BASE)
    data["failures"] = [{"kind": "trace", "file": str(tmp_path / "t.csv")}]
    return data


def test_trace_times_after_the_training_warn_naming_the_file(tmp_path):
    found = loads_with_warnings(_trace(tmp_path, "time_h,node\n1,emb_ps0\n5,emb_ps1\n9,emb_ps2\n"))
    assert found == [
        "failures.0.file: t.csv line 3, at 5 h, is after the failure-free training time (4 h): "
        "a failure after it strikes only if earlier ones delay the job that long (2 of 3 are "
        "after the training time)"
    ]


def test_a_trace_with_a_header_only_is_zero_failures_with_a_warning(tmp_path):
    data = _trace(tmp_path, "time_h,node\n")
    found = loads_with_warnings(data)
    assert found == [
        "failures.0.file: the trace lists no failures (only a header): none are replayed"
    ]
    s = validate_scenario(data, SMOKE, warn=False)
    assert failures.job_mtbf_s(s) == math.inf
    for index in range(len(s.policies)):
        sim = simulate(s, index, 0)
        assert sim.completed and sim.failures_seen == []


LANL = ["nodenum", "Prob Started", "Prob Fixed", "Down Time"]


def _log(tmp_path, rows, **source) -> dict:
    with (tmp_path / "log.csv").open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerows([LANL, *rows])
    data = copy.deepcopy(BASE)
    data["failures"] = [{"kind": "failure_log", "path": str(tmp_path / "log.csv"), **source}]
    return data


@pytest.mark.parametrize(
    ("rows", "source", "warning"),
    [
        ([], {}, "the log has no rows (only a header)"),
        ([["3", "6/21/2005 10:54", "", "5"]], {"start": "1/1/2006 0:00"}, "1 row before start"),
        ([["3", "6/21/2005 10:54", "", "5"]], {"nodes": {"4": "emb_ps0"}}, "mapped to no node"),
    ],
)
def test_a_log_window_without_failures_is_a_valid_scenario(tmp_path, rows, source, warning):
    data = _log(tmp_path, rows, **source)
    found = loads_with_warnings(data)
    assert len(found) == 1 and found[0].startswith("failures.0.path: ") and warning in found[0]
    s = validate_scenario(data, SMOKE, warn=False)
    assert simulate(s, 0, 0).failures_seen == []


# -- failure logs: times with zones, node ids, every error located ------------------------------


def test_zoned_log_times_are_converted_to_utc(tmp_path):
    rows = [
        ["1", "2005-06-21T10:54+02:00", "2005-06-21T11:54+02:00", ""],
        ["2", "2005-06-21T09:00Z", "", "30"],
    ]
    data = _log(tmp_path, rows, start="2005-06-21T09:54+01:00")  # 08:54 UTC
    s = validate_scenario(data, SMOKE)
    assert [(f.time_s, f.reschedule_s) for f in s.failures[0].events(None, s)] == [
        (0.0, 3600.0),
        (6.0 * 60, 1800.0),
    ]


@pytest.mark.parametrize(
    ("rows", "start", "where", "words"),
    [
        ([["1", "2005-06-21T10:54Z", "", "5"], ["2", "6/21/2005 11:00", "", "5"]], None,
         "line 3, column 2 (Prob Started)", "has no time zone but the log's first time"),
        ([["1", "6/21/2005 11:00", "", "5"], ["2", "2005-06-21T10:54+01:00", "", "5"]], None,
         "line 3, column 2 (Prob Started)", "has a time zone but the log's first time"),
        ([["1", "2005-06-21T10:54Z", "2005-06-21T11:54", ""]], None,
         "line 2, column 3 (Prob Fixed)", "has no time zone"),
    ],
)  # fmt: skip
def test_a_log_mixing_zoned_and_plain_times_is_refused_at_the_cell(
    tmp_path, rows, start, where, words
):
    found = problems(_log(tmp_path, rows))
    assert len(found) == 1 and f"log.csv {where}: " in found[0] and words in found[0], found


@pytest.mark.parametrize(
    ("start", "log_time", "words"),
    [
        (
            "2005-06-21T10:00+02:00",
            "6/21/2005 11:00",
            "has a time zone but the log's times have none",
        ),
        ("6/21/2005 10:00", "2005-06-21T11:00Z", "has no time zone but the log's times have one"),
    ],
)
def test_start_and_log_times_must_agree_on_zones(tmp_path, start, log_time, words):
    found = problems(_log(tmp_path, [["1", log_time, "", "5"]], start=start))
    assert found == [f"failures.0.start: {words}" + found[0].split(words)[1]]


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ("17", "17"),
        ("017", "17"),
        ("١٧", "17"),
        ("１７", "17"),
        ("²", "²"),
        ("①", "①"),
        ("n17", "n17"),
    ],
)
def test_node_ids_in_any_script_never_crash(tmp_path, node, expected):
    (tmp_path / "log.csv").write_text(f"nodenum,Prob Started,Down Time\n{node},6/21/2005 10:54,5\n")
    [entry] = read_failure_log(tmp_path / "log.csv")
    assert entry.node == expected
    s = validate_scenario(_log(tmp_path, [[node, "6/21/2005 10:54", "", "5"]]), SMOKE)
    assert len(list(s.failures[0].events(None, s))) == 1


LOG_CELL_ERRORS = [
    (["", "6/21/2005 10:54", "", "5"], 1, "nodenum", "nodenum is empty"),
    (["1", "", "", "5"], 2, "Prob Started", "Prob Started is empty"),
    (["1", "21.6.2005", "", "5"], 2, "Prob Started", "expected a time"),
    (["1", "6/21/2005 10:54", "soon", ""], 3, "Prob Fixed", "expected a time"),
    (["1", "6/21/2005 10:54", "6/21/2005 9:00", ""], 3, "Prob Fixed", "is before Prob Started"),
    (["1", "6/21/2005 10:54", "", ""], 4, "Down Time", "no repair time"),
    (["1", "6/21/2005 10:54", "", "-1"], 4, "Down Time", "minutes >= 0"),
    (["1", "6/21/2005 10:54", "", "nan"], 4, "Down Time", "minutes >= 0"),
    (["1", "6/21/2005 10:54", "", "soon"], 4, "Down Time", "minutes >= 0"),
    (["1", "2005-13-45T10:54", "", "5"], 2, "Prob Started", "expected a time"),
]


@pytest.mark.parametrize(("row", "column", "name", "words"), LOG_CELL_ERRORS)
def test_every_log_cell_error_names_file_line_and_column(tmp_path, row, column, name, words):
    good = ["9", "6/21/2005 8:00", "", "5"]
    with pytest.raises(LogError) as error:
        (tmp_path / "log.csv").write_text("\n".join(",".join(r) for r in [LANL, good, row]) + "\n")
        read_failure_log(tmp_path / "log.csv")
    assert str(error.value).startswith(f"log.csv line 3, column {column} ({name}): ")
    assert words in str(error.value)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "log.csv line 1: the file is empty"),
        ("System,Prob Started\n", "log.csv line 1: missing column nodenum"),
        ("nodenum,Prob Started,Down Time\n1," + "9" * 200_000 + "\n", "line 2: not a readable"),
        ("nodenum\x00", "log.csv: is a binary file"),
    ],
)
def test_every_log_file_error_names_the_file_and_line(tmp_path, text, words):
    (tmp_path / "log.csv").write_text(text)
    with pytest.raises(LogError, match=re.escape(words)):
        read_failure_log(tmp_path / "log.csv")


@pytest.mark.parametrize("kind", ["failure_log", "trace"])
def test_a_folder_given_as_a_failure_file_says_it_is_a_folder(tmp_path, kind):
    (tmp_path / "log.csv").mkdir()
    data = copy.deepcopy(BASE)
    field = "path" if kind == "failure_log" else "file"
    data["failures"] = [{"kind": kind, field: str(tmp_path / "log.csv")}]
    found = problems(data)
    assert len(found) == 1 and f"failures.0.{field}: " in found[0] and "is a folder" in found[0]


def test_a_scenario_yaml_timestamp_with_a_zone_is_a_start(tmp_path):
    """YAML reads an unquoted ISO time as a (zoned) datetime; it is accepted like text."""
    data = _log(tmp_path, [["1", "2005-06-21T11:00Z", "", "5"]])
    data["failures"][0]["start"] = yaml.safe_load("2005-06-21 10:00:00+00:00")
    s = validate_scenario(data, SMOKE)
    assert [f.time_s for f in s.failures[0].events(None, s)] == [3600.0]
