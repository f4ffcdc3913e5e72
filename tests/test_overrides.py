"""Overrides (--set, --grid, sweep: sections, the Python API): one interval key, wildcards
that skip the policies without the field, --policy before overrides, exclusive groups, and
ECRM's and SWIFT's old field name."""

import warnings

import pytest
import yaml

from ftsim.cli import main
from ftsim.experiments.sweep import plan_sweep
from ftsim.notices import RenamedField
from ftsim.scenario import overrides
from ftsim.scenario.loader import ScenarioError, load_scenario
from tests.conftest import SCENARIOS

PROD50H = SCENARIOS / "prod50h.yaml"
H = 3600.0


def _intervals(scenario) -> dict[str, float | None]:
    """Every policy's (and composed part's) interval by label."""
    found = {}
    for p in scenario.policies:
        for part in getattr(p, "parts", []):
            found[f"{p.label}/{part.label}"] = part.policy.interval
        if not hasattr(p, "parts"):
            found[p.label] = p.interval
    return found


def test_one_wildcard_sets_the_interval_of_every_policy_kind():
    scenario = load_scenario(PROD50H, ["policies.*.interval=15 min"])
    assert _intervals(scenario) == dict.fromkeys(
        ["full", "cpr", "cpr_mfu", "cpr_ssu", "ecrm", "swift"], 900.0
    )
    assert all(getattr(p, "target_pls", None) is None for p in scenario.policies)


def test_a_wildcard_reaches_the_parts_of_a_composed_policy():
    scenario = load_scenario(SCENARIOS / "composed.yaml", ["policies.*.interval=2 h"])
    assert set(_intervals(scenario).values()) == {2 * H}
    assert len(_intervals(scenario)) == 2 + 2 * 3
    # a field only some parts have: set there, the others untouched
    scenario = load_scenario(SCENARIOS / "composed.yaml", ["policies.*.replay_machines=2"])
    logged = [q.policy for p in scenario.policies for q in getattr(p, "parts", [])]
    assert [q.replay_machines for q in logged if q.kind == "swift"] == [2, 2]


def test_a_wildcard_skips_policies_without_the_field_and_fails_only_when_none_has_it():
    scenario = load_scenario(PROD50H, ["policies.*.k=3"])
    assert [getattr(p, "k", None) for p in scenario.policies] == [None] * 4 + [3, None]
    with pytest.raises(ScenarioError) as error:
        load_scenario(PROD50H, ["policies.*.k=3"], policies=["full", "cpr"])
    assert error.value.problems == [
        ("overrides", "policies.*.k: no selected policy has a field 'k'")  # --set on the CLI
    ]
    with pytest.raises(ScenarioError, match="did you mean 'interval'"):
        load_scenario(PROD50H, ["policies.*.intervall=1 h"])


def test_policy_selects_before_overrides_apply():
    """``fallback`` is a bool for CPR and rollback/partial for ECRM: with ECRM alone the
    wildcard is valid, whatever the other policies would say of it."""
    with pytest.raises(ScenarioError, match="policies.1.fallback"):
        load_scenario(PROD50H, ["policies.*.fallback=rollback"])
    scenario = load_scenario(PROD50H, ["policies.*.fallback=rollback"], policies=["ecrm"])
    assert [(p.kind, p.fallback) for p in scenario.policies] == [("ecrm", "rollback")]
    # an index is the file's, selected or not
    scenario = load_scenario(PROD50H, ["policies.4.k=4"], policies=["full", "ecrm"])
    assert scenario.policies[1].k == 4
    with pytest.raises(ScenarioError, match="no policy named 'cprr'"):
        load_scenario(PROD50H, policies=["cprr"])


def test_a_problem_of_a_selected_policy_names_its_place_in_the_file(tmp_path, capsys):
    """With ``--policy`` the scenario validated holds the selected policies only: a problem
    of SWIFT (``policies.5`` of prod50h) is named there, not at its place in the selection
    (``policies.0``), by run, sweep and the loader alike."""
    bad = ["policies.5.replay_machines=1000"]
    with pytest.raises(ScenarioError) as raised:
        load_scenario(PROD50H, bad, policies=["swift"])
    assert [where for where, _ in raised.value.problems] == ["policies.5.replay_machines"]
    with pytest.raises(ScenarioError, match=r"policies\.4\.k:"):
        load_scenario(PROD50H, ["policies.4.k=0"], policies=["full", "ecrm"])
    for command in ("run", "sweep"):
        args = [command, str(PROD50H), "--policy", "swift", "--no-trainer", "--reps", "1"]
        args += ["--set", bad[0], "-q", "-o", str(tmp_path / command)]
        assert main(args) == 2
        assert "prod50h.yaml: policies.5.replay_machines: exceeds" in capsys.readouterr().err


def test_an_override_of_an_exclusive_member_replaces_the_files():
    cpr = load_scenario(PROD50H, ["policies.1.interval=2 h"]).policies[1]
    assert (cpr.interval, cpr.target_pls) == (2 * H, None)
    text = "policies.*={kind: cpr, interval: 1 h}"
    cpr = load_scenario(PROD50H, [text, "policies.1.target_pls=0.2"], ["cpr"]).policies[0]
    assert (cpr.interval, cpr.target_pls) == (None, 0.2)
    cnr = SCENARIOS / "checknrun.yaml"
    part = load_scenario(cnr, ["policies.2.recovery=partial", "policies.2.target_pls=0.05"])
    assert (part.policies[2].interval, part.policies[2].target_pls) == (None, 0.05)


def test_the_rule_is_what_makes_an_exclusive_override_work(monkeypatch):
    """An injected bug (every field its own group) brings back the file's target_pls."""
    monkeypatch.setattr(overrides, "_group", lambda model, field: (field,))
    with pytest.raises(ScenarioError, match="exactly one of interval, target_pls"):
        load_scenario(PROD50H, ["policies.1.interval=2 h"])


def test_the_old_interval_name_is_accepted_with_a_located_deprecation_note(tmp_path):
    data = yaml.safe_load(PROD50H.read_text())
    data["policies"][4]["checkpoint_interval"] = data["policies"][4].pop("interval")
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.warns(RenamedField, match=r"old.yaml: policies.4.checkpoint_interval is dep"):
        assert load_scenario(path).policies[4].interval == 9 * H
    with pytest.warns(RenamedField, match=r"policies.5.checkpoint_interval is deprecated"):
        scenario = load_scenario(PROD50H, ["policies.5.checkpoint_interval=2 h"])
    assert scenario.policies[5].interval == 2 * H
    with pytest.warns(RenamedField), pytest.raises(ScenarioError, match="k: no selected"):
        load_scenario(path, ["policies.*.k=2"], policies=["swift"])
    data["policies"][4]["interval"] = "1 h"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError, match="give interval or its old name checkpoint_interval"):
        load_scenario(path)


def test_the_deprecation_note_is_one_stderr_line(tmp_path, capsys):
    data = yaml.safe_load((SCENARIOS / "smoke.yaml").read_text())
    data["policies"].append({"kind": "swift", "checkpoint_interval": "1 h"})
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(data))
    with warnings.catch_warnings():
        warnings.resetwarnings()
        assert main(["show", "config", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        f"ftsim: warning: {path}: policies.3.checkpoint_interval is deprecated: call it "
        "interval (the old name still works for now)"
    ]
    assert "checkpoint_interval" not in out


def test_a_python_mapping_of_overrides_is_applied_as_is():
    scenario = load_scenario(PROD50H, {"policies.*.interval": "30 min", "run.seed": 7})
    assert scenario.run.seed == 7 and set(_intervals(scenario).values()) == {1800.0}


MULTI_POLICY = [
    path
    for path in sorted(SCENARIOS.glob("*.yaml"))
    if len(yaml.safe_load(path.read_text())["policies"]) > 1
]


@pytest.mark.parametrize("path", MULTI_POLICY, ids=lambda p: p.stem)
def test_every_shipped_multi_policy_scenario_sweeps_one_interval_key(path):
    plan = plan_sweep(path, ["run.replications=1"], ["policies.*.interval=15 min,30 min,1 h"])
    assert "policies.*.interval" in plan.columns
    for point in plan.points:
        wanted = {"15 min": 900.0, "30 min": 1800.0, "1 h": H}[point.values["policies.*.interval"]]
        assert set(_intervals(point.scenario).values()) == {wanted}, path.name


def test_a_grid_key_replaces_the_files_key_of_the_same_choice():
    plan = plan_sweep(SCENARIOS / "cpr_pls.yaml", [], ["policies.*.interval=1 h,2 h"])
    assert plan.columns == ["policies.*.interval"]
    replaced = [str(n) for n in plan.notes if "replaces" in str(n)]
    assert replaced == [
        "grid policies.*.interval replaces the scenario's sweep.grid key "
        "policies.*.target_pls (both set policies.0.(interval | target_pls | "
        "target_accuracy_loss))"
    ]  # the others: MFU's and SSU's 2-h partial saves never come at 1 h and 2 h


def test_two_keys_of_one_sweep_setting_the_same_choice_are_an_error():
    grid = ["policies.*.interval=1 h,2 h", "policies.1.target_pls=0.1,0.2"]
    with pytest.raises(ScenarioError) as error:
        plan_sweep(PROD50H, [], grid)
    assert error.value.problems[0][0] == "sweep policies.1.target_pls"
    assert (
        "sets policies.1.(interval | target_pls | target_accuracy_loss), as sweep key "
        in (error.value.problems[0][1])
    )


def test_sweep_policy_selection_comes_before_the_grid(tmp_path):
    grid = ["policies.*.fallback=rollback,partial"]
    plan = plan_sweep(PROD50H, ["run.replications=1"], grid, policies=["ecrm"])
    assert [p.scenario.policies[0].fallback for p in plan.points] == ["rollback", "partial"]
    assert plan.policies == [0] and plan.base.policy_labels == ["ecrm"]


def test_a_sweep_folder_rebuilds_a_point_keyed_by_file_index(tmp_path):
    """The folder keeps only the selected policies; a point's key names the policy by its
    place in the file, which the manifest's policy_positions maps back (plot uses it)."""
    from ftsim.plots.data import RunData

    out = tmp_path / "s"
    args = ["sweep", str(PROD50H), "--policy", "full", "--policy", "ecrm", "--no-trainer"]
    assert main([*args, "--reps", "1", "--grid", "policies.4.k=2,4", "-q", "-o", str(out)]) == 0
    data = RunData.load(out)
    assert data.manifest["policy_positions"] == [0, 4]
    rebuilt = data.point_scenario(1)
    assert [p.label for p in rebuilt.policies] == ["full", "ecrm"]
    assert rebuilt.policies[1].k == 4


def test_a_sweep_section_of_the_file_follows_the_same_rules(tmp_path):
    data = yaml.safe_load(PROD50H.read_text())
    data["sweep"] = {"grid": {"policies.*.interval": ["20 min", "2 h"]}}
    path = tmp_path / "swept.yaml"
    path.write_text(yaml.safe_dump(data))
    plan = plan_sweep(path, ["run.replications=1"], [], policies=["cpr", "swift"])
    assert [_intervals(p.scenario) for p in plan.points] == [
        {"cpr": 1200.0, "swift": 1200.0},
        {"cpr": 2 * H, "swift": 2 * H},
    ]


def test_a_key_on_a_policy_not_selected_is_an_error_not_a_silent_no_op(tmp_path, capsys):
    """It set a policy that --policy then dropped: every point alike, any value accepted."""
    sweep = ["sweep", str(PROD50H), "--policy", "full", "--policy", "cpr", "--no-trainer", "-q"]
    grid = ["--grid", "policies.2.fraction=0.02,0.1", "-o", str(tmp_path / "s")]
    assert main([*sweep, *grid]) == 2
    err = capsys.readouterr().err
    assert (
        "sweep: policies.2: cpr_mfu is not among the policies selected (--policy: full, cpr)" in err
    )
    run = ["run", str(PROD50H), "--policy", "full", "--no-trainer", "-q", "-o", str(tmp_path / "r")]
    assert main([*run, "--set", "policies.1.target_pls=high"]) == 2
    assert "--set: policies.1: cpr is not among the policies selected (--policy: full)" in (
        capsys.readouterr().err
    )
    with pytest.raises(
        ScenarioError, match=r"cpr is not among the policies selected \(policies: full\)"
    ):
        plan_sweep(PROD50H, [], ["policies.1.interval=1 h,2 h"], policies=["full"])


def test_a_point_column_in_si_units_reads_the_policy_the_key_names_among_those_selected():
    """``policies.1.target_pls_si`` read the second selected policy's value (cpr_mfu's)."""
    plan = plan_sweep(PROD50H, [], ["policies.1.target_pls=0.05,0.2"], policies=["cpr", "cpr_mfu"])
    cells = [plan.row_cells(point, q) for point in plan.points for q in plan.policies]
    assert [c["policies.1.target_pls_si"] for c in cells] == [0.05, 0.05, 0.2, 0.2]
    plan = plan_sweep(PROD50H, [], ["policies.2.fraction=0.02,0.05"], policies=["cpr_mfu"])
    assert [plan.row_cells(p, 0)["policies.2.fraction_si"] for p in plan.points] == [0.02, 0.05]


def test_an_override_that_a_sweep_key_sets_too_is_said_to_be_replaced(tmp_path):
    """--set policies.1.interval=2 h with --grid policies.1.target_pls=…: the grid's values
    ran at every point and nothing said the --set was dropped (a new user's study)."""
    plan = plan_sweep(PROD50H, ["policies.1.interval=2 h"], ["policies.1.target_pls=0.05,0.2"])
    assert [str(n) for n in plan.notes] == [
        "sweep key policies.1.target_pls replaces overrides policies.1.interval at every point "
        "(both set policies.1.(interval | target_pls | target_accuracy_loss))"
    ]
    assert [p.scenario.policies[1].target_pls for p in plan.points] == [0.05, 0.2]
    unrelated = plan_sweep(PROD50H, ["policies.0.interval=2 h"], ["policies.1.target_pls=0.1,0.2"])
    assert unrelated.notes == []
    cleared = ["policies.1.target_pls=null", "policies.1.interval=3 h"]
    notes = plan_sweep(PROD50H, cleared, ["policies.1.interval=1 h,2 h"]).notes
    assert [str(n).split(" at every")[0] for n in notes] == [
        "sweep key policies.1.interval replaces overrides policies.1.interval"
    ]  # not the null: a field cleared stays clear
