"""Random damage to the committed scenarios: every changed file either loads and simulates a
replication, or is refused with a located ScenarioError; nothing else escapes (no
traceback, no engine crash on a value the schema let through)."""

import copy
import math
import os
import re
import typing
import warnings

import pytest
import simpy
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftsim.experiments.runner import simulate
from ftsim.scenario import schema
from ftsim.scenario.loader import ScenarioError, load_scenario, read_yaml, validate_scenario
from ftsim.sim.cluster import StateLayout
from ftsim.sim.failure_log import LogError, read_failure_log
from ftsim.sim.popularity import distinct_rows
from tests.conftest import SCENARIOS, scenario

NAMES = ["prod50h", "smoke", "composed", "checknrun", "swift_logging", "ecrm_vs_checkpoint"]
JUNK = [
    None, True, 0, -1, 1, 2, 7, 0.5, -0.5, 1e-300, 1e300, math.inf, math.nan, "", "abc",
    "1 parsec", "-3 h", "0 s", "1e9 GB/s", "zipf", [], [1], {}, {"kind": "nope"},
    "1e-300 s", "1 us", "1e12 h", 10**15, 2**62, 1e-9, "0 GB/s", "1e-300 B/s",
    "2005-06-21T10:54+02:00",
]  # fmt: skip
EXAMPLES = int(os.environ.get("FTSIM_FUZZ_EXAMPLES", "0"))
"""Examples per fuzz test instead of its default (e.g. 3000 for a long local run)."""


def _examples(default: int) -> int:
    return EXAMPLES or default


def _leaves(node, path=()):
    """Every (path, value) below ``node`` whose value is a scalar, a list or a mapping."""
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _leaves(value, (*path, i))


def _set(data, path, value):
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


@settings(max_examples=_examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(NAMES), data=st.data())
def test_damaged_scenarios_load_or_are_refused_with_a_located_error(name, data):
    path = SCENARIOS / f"{name}.yaml"
    original = read_yaml(path)
    damaged = copy.deepcopy(original)
    for _ in range(data.draw(st.integers(1, 2))):
        leaves = [p for p, _ in _leaves(damaged) if p and p[0] not in ("trainer", "run")]
        where = data.draw(st.sampled_from(leaves))
        _set(damaged, where, copy.deepcopy(data.draw(st.sampled_from(JUNK))))
    damaged.setdefault("trainer", {})["enabled"] = False
    try:
        scenario = validate_scenario(damaged, path)
    except ScenarioError as error:
        text = str(error)
        assert text.startswith(str(path)) and ": " in text
        return
    for index in range(len(scenario.policies)):  # accepted: it must also simulate
        row = simulate(scenario, index, 0).row()
        assert row["wall_h"] >= row["ideal_h"] or math.isclose(row["wall_h"], row["ideal_h"])


@settings(max_examples=_examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from([*NAMES, "cpr_pls", "daly"]), data=st.data())
def test_damaged_trainer_run_and_sweep_sections_are_refused_or_accepted(name, data):
    """The sections the simulation does not read (validated only: training is slow)."""
    path = SCENARIOS / f"{name}.yaml"
    damaged = read_yaml(path)
    for _ in range(data.draw(st.integers(1, 2))):
        leaves = [p for p, _ in _leaves(damaged) if p and p[0] in ("trainer", "run", "sweep")]
        if not leaves:
            return
        where = data.draw(st.sampled_from(leaves))
        _set(damaged, where, copy.deepcopy(data.draw(st.sampled_from(JUNK))))
    try:
        validate_scenario(damaged, path)
    except ScenarioError as error:
        assert str(error).startswith(str(path)) and ": " in str(error)


EXTREME = ["1 us", "1 ms", "1 s", 1e-9, 10**9, 2**62, "daly", "young"]
"""Values that make a plan or a replication costly (tiny windows and intervals, rules,
huge counts), for the cost fuzz."""
BUDGET = 2_000
"""The event budget the cost fuzz validates against: small, so that a scenario the budget
misjudges costs far more than it in a test of seconds."""
PLAN_FACTOR, STEP_FACTOR = 200, 20
"""An accepted scenario's planning (storage transfer times computed) and simulation
(SimPy steps) may cost these multiples of the budget: a few per event (measured: at most
4 steps per checkpoint, 12 per failure; Check-N-Run's interval rule plans its cycle about
15 times), never in proportion to a parameter beyond the budget."""


class CostExceeded(Exception):
    pass


class _Cost:
    """Counts the units of work of validation, planning and simulation (SimPy steps; planned
    storage transfers), raising CostExceeded past a limit instead of running on."""

    def __init__(self, patch: pytest.MonkeyPatch):
        self.steps = self.plans = 0
        step, write_s, read_s = simpy.Environment.step, StateLayout.write_s, StateLayout.read_s

        def counted_step(env):
            self.steps += 1
            if self.steps > STEP_FACTOR * BUDGET:
                raise CostExceeded(f"more than {STEP_FACTOR * BUDGET} SimPy steps")
            return step(env)

        def counted(method):
            def planned(layout, *args, **kwargs):
                self.plans += 1
                if self.plans > PLAN_FACTOR * BUDGET:
                    raise CostExceeded(f"more than {PLAN_FACTOR * BUDGET} planned transfers")
                return method(layout, *args, **kwargs)

            return planned

        patch.setattr(simpy.Environment, "step", counted_step)
        patch.setattr(StateLayout, "write_s", counted(write_s))
        patch.setattr(StateLayout, "read_s", counted(read_s))
        patch.setattr(schema, "MAX_EVENTS_PER_REPLICATION", BUDGET)


COSTLY = {"end", "start", "count", "job_mtbf", "mtbf", "domain_mtbf", "interval",
          "partial_interval", "baseline_every", "target_pls", "target_accuracy_loss"}  # fmt: skip
"""Fields that set how many failures and actions a replication has."""


def _settable(scenario) -> tuple[list[tuple], list[tuple]]:
    """Paths of every field of the failure sources and policies (given or not) and of the
    job's and run's fields that set the horizon; and those of them in :data:`COSTLY`."""
    paths = [("job", "training"), ("run", "max_wall_factor")]
    for section in ("failures", "policies"):
        for i, item in enumerate(getattr(scenario, section)):
            paths += [(section, i, name) for name in type(item).model_fields if name != "kind"]
            for j, part in enumerate(getattr(item, "parts", ())):  # a composed policy's
                fields = type(part.policy).model_fields
                paths += [(section, i, "parts", j, "policy", name) for name in fields]
    return paths, [p for p in paths if p[-1] in COSTLY or p[0] in ("job", "run")]


def _set_anywhere(data, path, value):
    """Set ``value`` at ``path`` of ``data``, making the mappings on the way; nothing when an
    earlier damage put a value without fields on the way (a composed policy's ``parts``
    made ``None``): that damage stands."""
    node = data
    for key in path[:-1]:
        if not _holds(node, key):
            return
        node = node.setdefault(key, {}) if isinstance(node, dict) else node[key]
    if _holds(node, path[-1]):
        node[path[-1]] = value


def _holds(node, key) -> bool:
    """Whether ``node`` has a place for ``key``: a mapping, or a list with that entry."""
    return isinstance(node, dict) or (isinstance(node, list) and 0 <= key < len(node))


@settings(max_examples=_examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from([*NAMES, "daly"]), data=st.data())
def test_an_accepted_scenario_plans_and_simulates_within_the_event_budget(name, data):
    """Extreme values in any field of the failure sources and policies (given in the file
    or not; mostly those that set how many failures and actions there are), the training
    time and the cut-off, with all the policies or one: the scenario is refused with a
    located error, or its validation, planning and replication cost a few units of work
    per event of the budget, whatever the values (an interval rule resolving to
    microseconds over a failure window of 1 us planned 10^6 checkpoints; a Check-N-Run
    baseline every 10^9 checkpoints planned each of them)."""
    path = SCENARIOS / f"{name}.yaml"
    damaged = read_yaml(path)
    damaged["trainer"] = {"enabled": False}
    if data.draw(st.booleans()):  # one policy: the others' budget does not mask its own
        damaged["policies"] = [data.draw(st.sampled_from(damaged["policies"]))]
    valid = validate_scenario(copy.deepcopy(damaged), path, warn=False)
    if data.draw(st.booleans()):  # the interval rules, where a policy has them
        for i, policy in enumerate(valid.policies):
            field = type(policy).model_fields.get("interval")
            if field is not None and str in typing.get_args(field.annotation):
                damaged["policies"][i]["interval"] = data.draw(st.sampled_from(["daly", "young"]))
    anywhere, costly = _settable(valid)
    for _ in range(data.draw(st.integers(1, 3))):
        if data.draw(st.booleans()):
            where, value = data.draw(st.sampled_from(costly)), data.draw(st.sampled_from(EXTREME))
        else:
            where, value = data.draw(st.sampled_from(anywhere)), data.draw(st.sampled_from(JUNK))
        _set_anywhere(damaged, where, copy.deepcopy(value))
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _Cost(patch)
        try:
            scenario = validate_scenario(damaged, path)
        except ScenarioError as error:
            assert str(error).startswith(str(path)) and ": " in str(error)
            return
        for index in range(len(scenario.policies)):
            simulate(scenario, index, 0)


@pytest.mark.parametrize(
    ("name", "keep", "overrides", "where"),
    [
        ("smoke", 1, [], "policies.0.interval"),  # full at daly
        ("prod50h", 1, ["policies.0.interval=young"], "policies.0.interval"),  # cpr
        ("checknrun", 2, ["policies.0.interval=daly", "policies.0.baseline_every=1000000000"],
         "policies.0.interval"),
        ("composed", 4, ["policies.0.parts.1.policy.interval=young"],
         "policies.0.parts.1.policy.interval"),  # checknrun in a composed policy
    ],
)  # fmt: skip
def test_an_interval_resolving_to_more_checkpoints_than_the_budget_is_refused(
    tmp_path, name, keep, overrides, where
):
    """Each policy kind that resolves an interval rule (full, cpr, checknrun, and the same
    inside a composed policy), given 5 failures in 1 us (a job MTBF of 0.2 us), refuses an
    interval of more checkpoints than the event budget, located at its field with the
    rule's inputs, before planning anything with it (Check-N-Run's cycle of 10^9
    checkpoints)."""
    data = read_yaml(SCENARIOS / f"{name}.yaml")
    data["policies"] = [data["policies"][keep]]
    data["failures"] = [{"kind": "scheduled", "count": 5, "end": "1 us"}]
    path = tmp_path / "tiny_window.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError) as error:
        load_scenario(path, [*overrides, "trainer.enabled=false"])
    pattern = rf"^{re.escape(str(path))}: {re.escape(where)}: (daly|young) \(job MTBF 2e-07 s"
    assert re.search(pattern + r".* checkpoints over job\.training", str(error.value))


TEXT = st.sampled_from(
    ["", "x", "-1", "0", "1e400", "nan", ".inf", "[", "{", "}", "[1, 2", "{a: 1}", "null",
     "~", "'quoted'", "1 h", "2 Gbit/s", "yes", "&a [*a]", "!!python/object:os.system ls"]
)  # fmt: skip


@settings(max_examples=_examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(NAMES), data=st.data())
def test_random_set_overrides_load_or_are_refused_with_a_located_error(name, data):
    """``--set PATH=VALUE`` with an existing or mangled path and YAML-ish text as the value."""
    path = SCENARIOS / f"{name}.yaml"
    dotted = [".".join(map(str, p)) for p, _ in _leaves(read_yaml(path)) if p]
    key = data.draw(
        st.one_of(
            st.sampled_from(dotted),
            st.sampled_from(dotted).map(lambda d: d + ".extra"),
            st.sampled_from(dotted).map(lambda d: d.replace("0", "99")),
            st.sampled_from(["", ".", "..", "policies.-1", "policies.x", "job..tables"]),
        )
    )
    try:
        load_scenario(path, [f"{key}={data.draw(TEXT)}"])
    except ScenarioError as error:
        assert str(error).startswith(str(path)) and ": " in str(error)


NODE_IDS = ["1", "017", " 3 ", "²", "①", "١٢", "１２", "n5", "", "-1", "1e3"]
TIMES = [
    "6/21/2005 10:54", "6/21/05 10:54:30", "2005-06-21T10:54Z", "2005-06-21T10:54+05:30",
    "2005-06-21 10:54", "2005-06-21T10:54-00:00", "13/45/2005 1:00", "junk", "", "0",
]  # fmt: skip
DOWN = ["5", "0", "", "-1", "nan", "inf", "x", "1e400"]
LOCATED = re.compile(r"^log\.csv( line \d+(, column \d+ \([^)]+\))?)?: \S")


@settings(max_examples=_examples(150), deadline=None)
@given(
    header=st.permutations(["nodenum", "Prob Started", "Prob Fixed", "Down Time", "System"]),
    rows=st.lists(
        st.tuples(
            st.sampled_from(NODE_IDS),
            st.sampled_from(TIMES),
            st.sampled_from(TIMES),
            st.sampled_from(DOWN),
            st.sampled_from(["20", "", "3"]),
        ),
        max_size=6,
    ),
)
def test_random_failure_logs_are_read_or_refused_at_a_located_cell(tmp_path_factory, header, rows):
    """Failure logs with node ids in any script, times with and without zones, bad cells:
    read, or a LogError naming the file (and line and column of a cell)."""
    path = tmp_path_factory.mktemp("log") / "log.csv"
    order = ["nodenum", "Prob Started", "Prob Fixed", "Down Time", "System"]
    lines = [",".join(header)]
    lines += [",".join(dict(zip(order, row, strict=True))[h] for h in header) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    try:
        entries = read_failure_log(path)
    except LogError as error:
        assert LOCATED.match(str(error)), str(error)
        return
    assert [e.started for e in entries] == sorted(e.started for e in entries)
    assert all(e.repair_s >= 0 and e.started.tzinfo is None for e in entries)


@pytest.mark.parametrize("name", NAMES)
def test_the_undamaged_scenarios_load(name):
    path = SCENARIOS / f"{name}.yaml"
    assert validate_scenario(read_yaml(path), path).name


# -- what the damage above found (each crashed with a traceback before its fix) ----------
def test_two_ecrm_variants_with_different_flow_caps_share_a_scenario():
    """Their per-connection caps are links of the scenario's network: named by cap, not
    shared (the rebuild_share links they replaced crashed the same way)."""
    s = validate_scenario(
        {
            **read_yaml(SCENARIOS / "prod50h.yaml"),
            "policies": [
                {"kind": "ecrm", "flow_bandwidth": "2 Gbit/s"},
                {"kind": "ecrm", "name": "slow", "flow_bandwidth": "1 Gbit/s"},
            ],
            "failures": [{"kind": "scheduled", "count": 3, "role": "emb_ps"}],
            "trainer": {"enabled": False},
        },
        SCENARIOS / "prod50h.yaml",
    )
    fast, slow = (simulate(s, i, 0) for i in range(2))
    assert slow.policy.recovery_s[0] > fast.policy.recovery_s[0]  # half the connection rate


@pytest.mark.parametrize(
    ("override", "where"),
    [
        ("policies.2.partial_interval=0", "policies.2.partial_interval"),  # divided by it
        ("policies.4.interval=0 s", "policies.4.interval"),
        ("policies.5.interval=0", "policies.5.interval"),
    ],
)
def test_zero_intervals_are_refused(override, where):
    with pytest.raises(ScenarioError, match=rf"{where}: Input should be greater than 0"):
        scenario("prod50h", override)


def test_a_broken_failure_source_is_reported_before_the_policies_plan_with_it():
    """A composed policy's parts plan with the failure rate: a scheduled source without
    count or times is reported, not divided by."""
    with pytest.raises(ScenarioError, match=r"failures\.0\.times: give exactly one") as error:
        scenario("composed", "failures.0.count=null")
    assert "policies" not in str(error.value)


def test_a_one_row_table_is_looked_up_surely_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert distinct_rows(((2, 1, 1.05),), 100.0) == 2.0
