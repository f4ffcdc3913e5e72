"""Malformed scenarios: every one gives located one-line errors and exit status 2.

Each variant is a change to ``scenarios/smoke.yaml`` (or raw text), run through the real
command line in a subprocess; the variants run concurrently to keep the suite fast.
"""

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from ftsim.cli import main
from ftsim.scenario.loader import read_yaml, set_path
from tests.conftest import SCENARIOS

SMOKE = read_yaml(SCENARIOS / "smoke.yaml")

# (name, change: dotted path -> value, or raw file text, expected dotted path, expected words)
VARIANTS = [
    ("unknown top key", {"jobb": {}}, "jobb", "unknown key 'jobb'; did you mean 'job'"),
    ("a name of dots", {"name": ".."}, "name", "other than '.' (got '..')"),  # output/..
    ("unknown nested key", {"cluster.trainer": 4}, "cluster.trainer", "did you mean 'trainers'"),
    ("unknown policy key", {"policies.0.intervl": "1 h"}, "policies.0.intervl", "'interval'"),
    (
        "unknown storage key",
        {"cluster.storage.write_bw": "1 GB/s"},
        "cluster.storage.write_bw",
        "unknown key",
    ),
    ("unknown failure key", {"failures.0.mtbf": "1 h"}, "failures.0.mtbf", "unknown key"),
    ("missing section", {"cluster": None}, "cluster", "(got null)"),
    (
        "missing field",
        {"cluster.storage": {"write_bandwidth": "1 GB/s"}},
        "cluster.storage.read_bandwidth",
        "required",
    ),
    ("wrong type", {"cluster.trainers": "many"}, "cluster.trainers", "(got 'many')"),
    (
        "mapping for a number",
        {"policies.0.persist_slowdown": {"a": 1}},
        "policies.0.persist_slowdown",
        'Input should be a valid number (got {"a": 1})',
    ),
    ("number for a section", {"cluster.storage": 5}, "cluster.storage", "dictionary (got 5)"),
    ("unknown trainer preset", {"trainer": {"preset": "big"}}, "trainer.preset", "'converged'"),
    ("negative count", {"cluster.emb_ps": -1}, "cluster.emb_ps", "greater than or equal to 1"),
    ("zero trainers", {"cluster.trainers": 0}, "cluster.trainers", "greater than or equal"),
    ("duration without unit", {"job.training": 5}, "job.training", "needs a unit"),
    ("bad duration unit", {"job.training": "5 fortnights"}, "job.training", "unknown time unit"),
    (
        "bad bandwidth unit",
        {"cluster.nic_bandwidth": "10 GB"},
        "cluster.nic_bandwidth",
        "per second",
    ),
    (
        "negative bandwidth",
        {"cluster.storage.read_bandwidth": "-1 GB/s"},
        "cluster.storage.read_bandwidth",
        "negative",
    ),
    (
        "zero bandwidth",
        {"cluster.storage.write_bandwidth": "0 GB/s"},
        "cluster.storage.write_bandwidth",
        "must be positive",
    ),
    (
        "both iteration time and throughput",
        {"job.throughput": 1000},
        "job",
        "exactly one of iteration_time and throughput",
    ),
    ("no training length", {"job.training": None}, "job", "exactly one of training and iterations"),
    (
        "training shorter than an iteration",
        {"job.iteration_time": "5 h"},
        "job",
        "the training, 1.44e+04 s, is shorter than one iteration (1.8e+04 s)",
    ),
    ("empty tables", {"job.tables": []}, "job.tables", "at least 1"),
    ("table rows not a number", {"job.tables.0.rows": "lots"}, "job.tables.0.rows", "whole number"),
    ("unknown policy kind", {"policies.0.kind": "ful"}, "policies.0.kind", "did you mean 'full'"),
    ("policy without kind", {"policies.0": {"interval": "1 h"}}, "policies.0.kind", "missing"),
    (
        "policy with type for kind",
        {"policies.0": {"type": "full"}},
        "policies.0.kind",
        "missing (is 'type' meant to be 'kind'?)",
    ),
    (
        "failure log with file for path",
        {"failures.0": {"kind": "failure_log", "file": "log.csv"}},
        "failures.0.file",
        "unknown key 'file'; did you mean 'path'?",
    ),
    (
        "NaN fraction",
        {"policies.0.persist_slowdown": float("nan")},
        "policies.0.persist_slowdown",
        "must be a finite number (got NaN)",
    ),
    (
        "NaN in bounds text",
        {"failures.0.job_mtbf": "nan h"},
        "failures.0.job_mtbf",
        "(got 'nan h')",
    ),
    ("no policies", {"policies": []}, "policies", "at least 1"),
    ("bad interval rule", {"policies.0.interval": "optimal"}, "policies.0.interval", "young, daly"),
    ("bad save mode", {"policies.0.save_mode": "async"}, "policies.0.save_mode", "'sync'"),
    (
        "duplicate policy names",
        {"policies.1.name": None, "policies.2.name": None},
        "policies.1.name",
        "duplicate policy name",
    ),
    ("unknown failure kind", {"failures.0.kind": "poisson"}, "failures.0.kind", "unknown kind"),
    ("two MTBFs", {"failures.0.node_mtbf": "8 h"}, "failures.0.node_mtbf", "exactly one"),
    ("bad role", {"failures.0.role": "gpu"}, "failures.0.role", "'trainer'"),
    (
        "weibull without shape",
        {"failures.0": {"kind": "weibull", "node_mtbf": "1 h"}},
        "failures.0.shape",
        "required",
    ),
    (
        "scheduled victims too many",
        {"failures.0": {"kind": "scheduled", "count": 2, "nodes_per_failure": 9}},
        "failures.0.nodes_per_failure",
        "exceeds the 4 nodes",
    ),
    (
        "scheduled unknown node",
        {"failures.0": {"kind": "scheduled", "times": ["1 h"], "nodes": [["emb_ps9"]]}},
        "failures.0.nodes.0.0",
        "does not exist",
    ),
    (
        "scheduled both times and count",
        {"failures.0": {"kind": "scheduled", "times": ["1 h"], "count": 3}},
        "failures.0.times",
        "exactly one of times and count",
    ),
    (
        "correlated domain too big",
        {"failures.0": {"kind": "correlated", "domain_size": 20, "domain_mtbf": "1 h"}},
        "failures.0.domain_size",
        "larger than",
    ),
    (
        "missing trace file",
        {"failures.0": {"kind": "trace", "file": "nope.csv"}},
        "failures.0.file",
        "trace file not found",
    ),
    (
        "reschedule uniform without bounds",
        {"cluster.reschedule": {"kind": "uniform"}},
        "cluster.reschedule",
        "uniform needs low and high",
    ),
    (
        "lognormal without cv",
        {"cluster.reschedule": {"kind": "lognormal", "mean": "1 min"}},
        "cluster.reschedule",
        "lognormal needs cv",
    ),
    ("negative seed", {"run.seed": -3}, "run.seed", "greater than or equal to 0"),
    ("zero replications", {"run.replications": 0}, "run.replications", "greater than or equal"),
    ("bad scenario name", {"name": "my scenario!"}, "name", "pattern"),
    (
        "sweep zip lengths differ",
        {"sweep": {"zip": {"a": [1, 2], "b": [1]}}},
        "sweep",
        "equal lengths",
    ),
    (
        "sweep unknown reference",
        {"sweep": {"reference": "cpr"}},
        "sweep.reference",
        "no policy named 'cpr' (the scenario has: full, full_daly, checkfreq)",
    ),
    ("bad YAML", "name: smoke\njob: [unclosed\n", "(top level)", "invalid YAML at line"),
    ("not a mapping", "- just\n- a list\n", "(top level)", "must be a mapping"),
    ("empty file", "", "(top level)", "must be a mapping"),
]


def _write_variant(tmp_path, name, change):
    path = tmp_path / (name.replace(" ", "_") + ".yaml")
    if isinstance(change, str):
        path.write_text(change)
        return path
    data = yaml.safe_load(yaml.safe_dump(SMOKE))
    for key, value in change.items():
        set_path(data, key.split("."), value)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _run(args):
    return subprocess.run(
        [sys.executable, "-m", "ftsim", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("variants")
    paths = [_write_variant(tmp, name, change) for name, change, _, _ in VARIANTS]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(
            pool.map(lambda p: _run(["run", str(p), "-q", "-o", str(tmp / "out")]), paths)
        )
    return dict(zip([v[0] for v in VARIANTS], zip(paths, results, strict=True), strict=True))


def test_there_are_at_least_thirty_variants():
    assert len(VARIANTS) >= 30


@pytest.mark.parametrize(
    ("name", "change", "where", "words"), VARIANTS, ids=[v[0] for v in VARIANTS]
)
def test_variant_is_reported_located_with_exit_2(outcomes, name, change, where, words):
    path, result = outcomes[name]
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert lines and all(line.startswith(f"{path}: ") for line in lines)
    assert any(f"{path}: {where}: " in line and words in line for line in lines), lines


def test_missing_file_and_bad_set_and_bad_policy(tmp_path):
    missing = _run(["run", str(tmp_path / "absent.yaml")])
    assert missing.returncode == 2 and "absent.yaml: (top level): file not found" in missing.stderr
    bad_set = _run(["run", str(SCENARIOS / "smoke.yaml"), "--set", "cluster.emb_ps=zero"])
    assert bad_set.returncode == 2 and "cluster.emb_ps:" in bad_set.stderr
    bad_index = _run(["run", str(SCENARIOS / "smoke.yaml"), "--set", "policies.7.name=x"])
    assert bad_index.returncode == 2 and "--set: policies.7: no list entry" in bad_index.stderr
    bad_policy = _run(["run", str(SCENARIOS / "smoke.yaml"), "--policy", "cpr", "-q"])
    assert bad_policy.returncode == 2 and "no policy named 'cpr'" in bad_policy.stderr
    for result in (missing, bad_set, bad_index, bad_policy):
        assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["run", "sweep", "advise"])
def test_a_count_option_out_of_range_is_named_as_typed(command, capsys):
    """``--reps 0`` was reported as ``run.replications: Input should be greater than or equal
    to 1``: a YAML path and pydantic's words for what the user typed as an option."""
    scenario = str(SCENARIOS / "smoke.yaml")
    assert main([command, scenario, "--reps", "0", "-q"]) == 2
    assert capsys.readouterr().err == "ftsim: --reps must be at least 1 (got 0)\n"
    assert main([command, scenario, "--seed", "-1", "-q"]) == 2
    assert capsys.readouterr().err == "ftsim: --seed must be at least 0 (got -1)\n"


def test_settings_that_contradict_each_other_are_refused_not_resolved_silently(capsys):
    """``--set policies.1.interval=2h --set policies.1.target_pls=0.01`` ran with the later
    (in a file, both are an error); ``--reps 3 --set run.replications=5`` ran 3 and
    ``--no-trainer --set trainer.enabled=true`` timing only, whatever the order. A wildcard
    then a specific key refines, as before."""
    prod50h = str(SCENARIOS / "prod50h.yaml")
    both = ["--set", "policies.1.interval=2 h", "--set", "policies.1.target_pls=0.01"]
    assert main(["run", prod50h, *both, "-q"]) == 2
    assert capsys.readouterr().err.endswith(
        "prod50h.yaml: --set: policies.1.interval and policies.1.target_pls both given: "
        "policies.1 takes one of interval, target_pls, target_accuracy_loss\n"
    )
    smoke = str(SCENARIOS / "smoke.yaml")
    for option, key in (
        (["--reps", "3"], "run.replications=5"),
        (["--seed", "3"], "run.seed=5"),
        (["--no-trainer"], "trainer.enabled=true"),
    ):
        assert main(["run", smoke, *option, "--set", key, "-q"]) == 2
        said = f"ftsim: {option[0]} and --set {key.partition('=')[0]} both given: give one\n"
        assert capsys.readouterr().err == said
    import ftsim
    from ftsim.experiments.study import StudyError

    with pytest.raises(StudyError, match=r"reps and overrides\['run.replications'\] both"):
        ftsim.run(smoke, overrides={"run.replications": 5}, reps=3)


def test_a_wildcard_then_a_specific_key_refines(tmp_path):
    """``policies.*.interval`` then one policy's ``target_pls``: that policy plans by PLS,
    the others run the interval."""
    from ftsim.scenario.loader import load_scenario

    s = load_scenario(
        SCENARIOS / "prod50h.yaml",
        ["policies.*.interval=2 h", "policies.1.target_pls=0.01"],
    )
    assert s.policies[1].target_pls == 0.01 and s.policies[1].interval is None
    assert s.policies[0].interval == 7200


def test_a_share_option_takes_a_number_or_a_percentage(capsys):
    """``--max-pls 5%`` was refused with argparse's "invalid float value": a share may be
    given as a percentage (5% is 0.05); anything else is named with both forms."""
    from ftsim.cli import share

    assert share("0.05") == 0.05 and share("5%") == 0.05 and share(" 12.5 % ") == 0.125
    with pytest.raises(SystemExit) as stop:
        main(["advise", str(SCENARIOS / "smoke.yaml"), "--max-pls", "five"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.endswith(
        "error: argument --max-pls: expected a number such as 0.05, or a percentage such as "
        "5% (got 'five')\n"
    )
    assert "Traceback" not in err


def test_a_negative_share_is_named_by_its_check_not_taken_for_an_option(capsys):
    """``--max-pls -5%`` said argparse's "expected one argument" (``-5%`` looked like an
    option); its range check now names it, for advise and plot alike. ``plot`` refuses a
    limit above 1 (``200%``): PLS is a portion of the samples."""
    smoke = str(SCENARIOS / "smoke.yaml")
    assert main(["advise", smoke, "--max-pls", "-5%"]) == 2
    assert capsys.readouterr().err == (
        "ftsim: --max-pls must be a number from 0 to 1 (got -0.05)\n"
    )
    assert main(["advise", smoke, "--max-memory-overhead", "-.5", "--max-pls", "5%"]) == 2
    assert "--max-memory-overhead must be a number >= 0 (got -0.5)" in capsys.readouterr().err
    for value, shown in (("-5%", "-0.05"), ("200%", "2")):
        assert main(["plot", smoke, "--max-pls", value]) == 2
        assert capsys.readouterr().err == (
            f"ftsim: --max-pls must be a number from 0 to 1 (got {shown})\n"
        )


def test_a_new_failure_source_is_given_whole_or_its_kind_first(capsys):
    """``--grid failures.1.job_mtbf=2 h`` on a scenario with one source said
    ``failures.1.kind: is required but missing``: a new entry needs its kind first."""
    args = ["sweep", str(SCENARIOS / "smoke.yaml"), "--grid", "failures.1.job_mtbf=2 h", "-q"]
    assert main(args) == 2
    assert (
        "sweep: failures.1: a new entry (the list has 1): give it whole (failures.1={kind: …}) "
        "or its kind first (failures.1.kind=…)" in capsys.readouterr().err
    )
    from ftsim.scenario.loader import load_scenario

    kind_first = ["failures.1.kind=exponential", "failures.1.job_mtbf=2 h"]
    s = load_scenario(SCENARIOS / "smoke.yaml", kind_first)
    assert s.failures[1].kind == "exponential" and s.failures[1].job_mtbf == 7200


def test_a_key_deeper_than_any_field_is_a_located_error(capsys):
    """A --set key of 1,000 parts was a RecursionError traceback."""
    key = ".".join(["a"] * 1000)
    assert main(["run", str(SCENARIOS / "smoke.yaml"), "--set", f"{key}=1", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.endswith(": more than 50 parts (no field is that deep)\n") and len(err) < 200


def test_a_key_longer_than_any_field_path_is_said_in_one_short_line(capsys):
    """A 100,000-character key was echoed twice: a 200 KB error line."""
    assert main(["run", str(SCENARIOS / "smoke.yaml"), "--set", f"{'k' * 100_000}=1", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.endswith(": 100000 characters (no field path is that long)\n") and len(err) < 200
