"""Sweeps: points, validation, and identical results whatever the executor and batching."""

import csv
import io
import math

import pytest
import yaml

from ftsim.cli import main
from ftsim.experiments.store import RunStore
from ftsim.experiments.sweep import expand, finish, parse_grid_option, plan_sweep, run_sweep
from ftsim.scenario.loader import ScenarioError
from ftsim.scenario.schema import Sweep
from tests.conftest import RUN_FILES, SCENARIOS

SMOKE = SCENARIOS / "smoke.yaml"
INTERVALS = "policies.*.interval=10 min,30 min"


def _plan(*grid, reps=3, overrides=(), **options):
    return plan_sweep(
        SMOKE,
        [f"run.replications={reps}", *overrides],
        list(grid),
        None,
        **options,
    )


def _sweep(tmp_path, plan, name, **options) -> bytes:
    store = RunStore.create(tmp_path / name, {"config_hash": plan.config_hash})
    run_sweep(plan, store, **options)
    finish(plan, store)
    return (tmp_path / name / "runs.csv").read_bytes()


def test_grid_is_a_cartesian_product_and_zip_co_varies():
    sweep = Sweep(grid={"a": [1, 2], "b": ["x", "y"]}, zip={"c": [10, 20], "d": [0.1, 0.2]})
    points = expand(sweep)
    assert len(points) == 8
    assert points[0] == {"a": 1, "b": "x", "c": 10, "d": 0.1}
    assert points[1] == {"a": 1, "b": "x", "c": 20, "d": 0.2}
    assert points[-1] == {"a": 2, "b": "y", "c": 20, "d": 0.2}
    assert expand(None) == [{}]
    assert expand(Sweep()) == [{}]


def test_grid_option_reads_yaml_scalars_and_lists():
    assert parse_grid_option("policies.*.interval=15 min, 1 h", SMOKE) == (
        "policies.*.interval",
        ["15 min", "1 h"],
    )
    assert parse_grid_option("run.seed=1,2", SMOKE) == ("run.seed", [1, 2])
    assert parse_grid_option("x.y=[1, [2, 3]]", SMOKE) == ("x.y", [1, [2, 3]])
    with pytest.raises(ScenarioError, match="--grid"):
        parse_grid_option("novalues", SMOKE)


def test_points_carry_their_values_and_the_yaml_sweep_section_merges_with_grid(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        SMOKE.read_text()
        + "sweep:\n  grid:\n    cluster.storage.write_bandwidth: [1 GB/s, 2 GB/s]\n"
        + "  reference: checkfreq\n"
    )
    plan = plan_sweep(scenario, [], [INTERVALS], ["full", "checkfreq"])
    assert plan.columns == ["cluster.storage.write_bandwidth", "policies.*.interval"]
    assert len(plan.points) == 4
    assert plan.reference == "checkfreq"
    assert plan.points[3].scenario.policies[1].interval == 1800.0
    assert plan.points[3].scenario.cluster.storage.write_bandwidth == 2e9
    assert plan.row_cells(plan.points[3], 1) == {
        "point": 3,
        "cluster.storage.write_bandwidth": "2 GB/s",
        "cluster.storage.write_bandwidth_si": 2e9,
        "policies.*.interval": "30 min",
        "policies.*.interval_si": 1800.0,
    }


def test_bad_grid_value_is_located_and_exits_2(capsys):
    assert main(["sweep", str(SMOKE), "--grid", "policies.*.interval=10 min,soon", "-q"]) == 2
    err = capsys.readouterr().err
    assert "smoke.yaml: policies.0.interval:" in err
    assert "sweep point 1: policies.*.interval=soon" in err
    assert len(err.splitlines()) == 3  # one line per policy, not per point


def test_unknown_grid_key_suggests_the_closest_and_exits_2(capsys):
    assert main(["sweep", str(SMOKE), "--grid", "policies.*.intervall=1 h", "-q"]) == 2
    err = capsys.readouterr().err
    assert "sweep: policies.*.intervall: no selected policy has a field 'intervall'" in err
    assert "did you mean 'interval'?" in err
    assert main(["sweep", str(SMOKE), "--grid", "policies.9.interval=1 h", "-q"]) == 2
    assert "no list entry '9'" in capsys.readouterr().err


def test_a_grid_key_given_twice_or_a_value_repeated_is_refused(capsys, tmp_path):
    """``--grid k=10 min --grid k=20 min`` ran 20 min alone without a word, and a value
    given twice made two identical points (a new user's study); so does a file's grid."""
    interval = "policies.0.interval"
    twice = ["--grid", f"{interval}=10 min", "--grid", f"{interval}=20 min"]
    assert main(["sweep", str(SMOKE), *twice, "-q"]) == 2
    assert capsys.readouterr().err == (
        f"{SMOKE}: --grid {interval}: given twice: give all its values in one --grid\n"
    )
    for values in ("10 min,20 min,10 min", "[10 min, 10 min]"):
        assert main(["sweep", str(SMOKE), "--grid", f"{interval}={values}", "-q"]) == 2
        assert "repeats the value '10 min'" in capsys.readouterr().err
    data = yaml.safe_load(SMOKE.read_text())
    data["sweep"] = {"grid": {interval: ["10 min", "10 min"]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    assert main(["sweep", str(tmp_path / "s.yaml"), "-q"]) == 2
    assert f"grid {interval}: repeats the value '10 min'" in capsys.readouterr().err


def test_same_csv_for_serial_process_pool_dask_and_any_batching(tmp_path):
    distributed = pytest.importorskip("distributed")
    plan = _plan(INTERVALS, reps=5)
    serial = _sweep(tmp_path, plan, "serial", jobs=1)
    assert serial == _sweep(tmp_path, plan, "pool", jobs=2, batch=2)
    assert serial == _sweep(tmp_path, plan, "batch3", jobs=1, batch=3)
    with distributed.LocalCluster(
        n_workers=2, processes=False, threads_per_worker=1, dashboard_address=None
    ) as cluster:
        dask = _sweep(
            tmp_path, plan, "dask", executor="dask", dask_address=cluster.scheduler_address
        )
    assert serial == dask
    rows = list(csv.DictReader(io.StringIO(serial.decode())))
    assert len(rows) == 2 * 3 * 5
    assert [r["policies.*.interval"] for r in rows[:16:5]] == ["10 min"] * 3 + ["30 min"]
    assert (tmp_path / "pool" / "timeline.csv").read_bytes() == (
        tmp_path / "serial" / "timeline.csv"
    ).read_bytes()


def test_sweep_rows_are_the_rows_of_run(tmp_path):
    assert main(["run", str(SMOKE), "--reps", "3", "-q", "-o", str(tmp_path / "run")]) == 0
    plan = _plan(reps=3)
    _sweep(tmp_path, plan, "sweep", jobs=1)
    run = list(csv.DictReader((tmp_path / "run" / "runs.csv").open()))
    swept = list(csv.DictReader((tmp_path / "sweep" / "runs.csv").open()))
    assert [{k: v for k, v in r.items() if k != "point"} for r in swept] == run


def test_common_random_numbers_across_points(tmp_path):
    plan = _plan("cluster.storage.write_bandwidth=1 GB/s,4 GB/s", reps=4)
    _sweep(tmp_path, plan, "crn", jobs=1)
    timeline = list(csv.DictReader((tmp_path / "crn" / "timeline.csv").open()))
    failures = [
        [
            (r["start_h"], r["detail"])
            for r in timeline
            if r["kind"] == "failure" and r["point"] == p
        ]
        for p in ("0", "1")
    ]
    seen = min(len(f) for f in failures)
    assert seen > 0
    assert failures[0][:seen] == failures[1][:seen]  # the same failures at both points


def test_target_halfwidth_adds_replications_deterministically(tmp_path):
    plan = _plan(reps=4, target_halfwidth=0.03, max_reps=30)
    first = _sweep(tmp_path, plan, "a", jobs=1, batch=4)
    assert first == _sweep(tmp_path, plan, "b", jobs=2, batch=4)
    summary = list(csv.DictReader((tmp_path / "a" / "summary.csv").open()))
    for s in summary:
        assert float(s["overhead_frac_ci95_half"]) <= 0.03 or int(s["n"]) == 30
    assert max(int(s["n"]) for s in summary) > 4


def test_cli_sweep_writes_the_run_folder_and_refuses_a_foreign_resume(tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["sweep", str(SMOKE), "--grid", INTERVALS, "--reps", "2", "--jobs", "1", "-o", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "computed 12, reused 0 (replications)" in printed
    for name in RUN_FILES:
        assert (out / name).stat().st_size > 0
    assert main(args) == 2
    assert "already holds a sweep" in capsys.readouterr().err
    for command in ("run", "advise"):  # no --resume to suggest: only a sweep continues
        assert main([command, str(SMOKE), "--reps", "2", "-q", "-o", str(out)]) == 2
        assert capsys.readouterr().err == (
            f"ftsim: {out}: the folder is not empty and holds the output of 'ftsim sweep', not "
            f"earlier output of 'ftsim {command}'; choose another folder, or pass --force to "
            "write into it (files of the same names are replaced)\n"
        )
    resume = ["sweep", str(SMOKE), "--grid", INTERVALS, "--reps", "2", "--resume", str(out)]
    assert main([*resume, "-q"]) == 0
    assert "computed 0, reused 12 (replications)" in capsys.readouterr().out
    assert main([*resume[:-2], "--reps", "3", "--resume", str(out)]) == 2
    assert "different sweep" in capsys.readouterr().err


def test_force_starts_a_sweep_over_and_reuses_nothing_of_the_earlier_one(tmp_path, capsys):
    """The documented way to regenerate a sweep folder (results/README.md): ``--force``
    replaces it. The earlier sweep's shards go, or a later ``--resume`` of the new sweep
    could take them for its own."""
    out = tmp_path / "sweep"
    args = ["sweep", str(SMOKE), "--reps", "2", "--jobs", "1", "-q", "-o", str(out)]
    assert main([*args, "--grid", INTERVALS]) == 0
    before = {p.name for p in (out / "shards").iterdir()}
    assert main([*args, "--grid", "policies.*.interval=20 min", "--force"]) == 0
    assert "computed 6, reused 0 (replications)" in capsys.readouterr().out
    after = {p.name for p in (out / "shards").iterdir()}
    assert len(after) < len(before)


def test_target_halfwidth_reads_only_finished_replications():
    """Unfinished replications (overhead inf) are left out of the interval, as in the
    summary: four close overheads and two unfinished need no more replications."""
    from types import SimpleNamespace

    from ftsim.experiments.sweep import _more_replications

    rows = [{"rep": r, "overhead_frac": 0.05 + 1e-4 * r} for r in range(4)]
    rows += [{"rep": r, "overhead_frac": math.inf} for r in (4, 5)]
    store = SimpleNamespace(task_rows=lambda: [(SimpleNamespace(point=0, policy=0), rows)])
    plan = SimpleNamespace(target_halfwidth=0.01, max_reps=100)
    assert _more_replications(plan, store, {(0, 0): 6}, batch=2) == {}
    wide = [{**row, "overhead_frac": 0.05 + 0.05 * row["rep"]} for row in rows[:4]]
    store = SimpleNamespace(task_rows=lambda: [(SimpleNamespace(point=0, policy=0), wide)])
    assert _more_replications(plan, store, {(0, 0): 6}, batch=2) == {(0, 0): 100}


def test_a_point_without_the_reference_policy_says_why_its_differences_are_missing():
    """A sweep of policies.0.kind renames the reference (full) at the point where it is cpr:
    Δ vs ref read '-' there with no reason."""
    from ftsim.experiments.tables import sweep_table

    records = [
        {"point": 0, "policy": "full", "reference": "full", "n": 2, "k": "full"},
        {"point": 1, "policy": "cpr", "reference": "full", "n": 2, "k": "cpr"},
    ]
    for s in records:
        s |= {"overhead_frac_mean": 0.1, "overhead_frac_ci95_half": 0.01, "n_unfinished": 0}
    text = sweep_table(records, ["k"])
    assert text.splitlines()[-1] == "Δ vs ref: '-' where full, the reference, did not run (k=cpr)"
    assert "did not run" not in sweep_table(records[:1], ["k"])


def test_a_half_width_too_small_for_two_decimals_is_shown_to_two_digits():
    """CPR's 95% half-width on prod50h, 0.0024%, was printed 0.00%, as if every replication
    had cost the same; a half-width of rounding only (1e-16) still reads 0.00%."""
    from ftsim.experiments.tables import half_pct

    assert half_pct(0.000024) == "0.0024%" and half_pct(0.0000064) == "0.00064%"
    assert half_pct(0.0031) == "0.31%" and half_pct(0.00005) == "0.01%"
    assert half_pct(5e-16) == "0.00%" and half_pct(0.0) == "0.00%"
    assert half_pct(float("nan")) == "-" and half_pct(3e-9) == "3.0e-07%"
