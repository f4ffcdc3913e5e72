"""The Python API (``ftsim.run``, ``ftsim.sweep``, ``ftsim.load``): the command line's
files and rows, its located errors, one summary format, numeric ``<key>_si`` columns."""

import json
import subprocess
import sys
import tempfile
import warnings

import pandas as pd
import pytest

import ftsim
from ftsim.cli import main
from ftsim.experiments.folders import FolderError
from ftsim.experiments.study import StudyError
from ftsim.scenario.loader import ScenarioError
from tests.conftest import SCENARIOS

SMOKE = SCENARIOS / "smoke.yaml"
PROD50H = SCENARIOS / "prod50h.yaml"


def test_import_ftsim_is_cheap_and_exports_the_api_lazily():
    code = (
        "import sys, ftsim; heavy = {'pandas', 'simpy', 'pydantic', 'numpy', 'scipy'}; "
        "print(sorted(heavy & set(sys.modules))); "
        "print(ftsim.run.__module__, 'sweep' in dir(ftsim))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["[]", "ftsim.api True"]
    with pytest.raises(AttributeError, match="no attribute 'runn'"):
        ftsim.runn  # noqa: B018


def test_a_fresh_session_loads_a_scenario_with_the_api_alone():
    """``import ftsim`` then ``ftsim.load_scenario``: the policy kinds are registered by the
    API itself (the test session's conftest registers them, which would hide this)."""
    code = f"import ftsim; print(ftsim.load_scenario({str(PROD50H)!r}).policies[0].kind)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "full"


def test_run_gives_the_command_lines_runs_csv(tmp_path):
    """The acceptance check of issue 21: the API's rows are the CLI's runs.csv."""
    results = ftsim.run(PROD50H, reps=3, trainer=False, out=tmp_path / "api")
    argv = ["run", str(PROD50H), "--reps", "3", "--no-trainer", "-q", "-o", str(tmp_path / "cli")]
    assert main(argv) == 0
    cli = pd.read_csv(tmp_path / "cli" / "runs.csv")
    pd.testing.assert_frame_equal(results.runs, cli, check_dtype=False, check_exact=True)
    assert len(cli) == 6 * 3 and {"wall_h", "overhead_frac", "lost_h"} <= set(cli)
    for name in ("runs.csv", "timeline.csv", "summary.csv"):
        assert (tmp_path / "api" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes()
    assert results.folder == tmp_path / "api"
    assert results.scenario.name == "prod50h" and results.columns == []


def test_a_loaded_scenario_and_a_temporary_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the temporary folder goes here
    by_path = ftsim.run(SMOKE, reps=2, out=tmp_path / "a")
    loaded = ftsim.load_scenario(SMOKE, {"run.replications": 2})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # its dump spells out defaults: no "has no effect"
        by_object = ftsim.run(loaded)
        assert ftsim.load(by_object.folder).scenario.name == "smoke"
    assert by_object.folder.parent == tmp_path and by_object.folder.name.startswith("ftsim-smoke-")
    pd.testing.assert_frame_equal(by_object.runs, by_path.runs)


def test_overrides_are_validated_like_set(tmp_path, capsys):
    with pytest.raises(ScenarioError) as api:
        ftsim.run(SMOKE, {"policies.0.interval": "soon", "policies.9.interval": "1 h"})
    assert main(["run", str(SMOKE), "--set", "policies.0.interval=soon", "--set",
                 "policies.9.interval=1 h", "-o", str(tmp_path / "x")]) == 2  # fmt: skip
    # the command line's lines, the overrides named as the argument they came in
    cli = capsys.readouterr().err.strip()
    assert str(api.value) == cli.replace(": --set: ", ": overrides: ")
    assert "smoke.yaml: --set: policies.9: no list entry '9'" in cli
    assert "smoke.yaml: overrides: policies.9: no list entry '9'" in str(api.value)
    with pytest.raises(ScenarioError, match="smoke.yaml: overrides: policies.9: no list"):
        ftsim.load_scenario(SMOKE, {"policies.9.interval": "1 h"})
    with pytest.raises(ScenarioError, match=r"<scenario smoke>: policies.0.interval:"):
        ftsim.run(ftsim.load_scenario(SMOKE), {"policies.0.interval": "soon"})
    # values are data, not YAML text: a string stays a string
    assert ftsim.load_scenario(SMOKE, {"description": "1"}).description == "1"


def test_bad_options_are_study_errors():
    with pytest.raises(ScenarioError, match="smoke.yaml: policies: no policy named 'nope'"):
        ftsim.run(SMOKE, policies="nope")
    with pytest.raises(StudyError, match="jobs must be"):
        ftsim.run(SMOKE, jobs=0)
    with pytest.raises(StudyError, match="executor must be one of"):
        ftsim.sweep(SMOKE, {"run.seed": [1]}, executor="threads")


def test_run_and_sweep_write_one_summary_format(tmp_path):
    run = ftsim.run(SMOKE, reps=3, policies=["full", "checkfreq"], out=tmp_path / "run")
    sweep = ftsim.sweep(SMOKE, {}, reps=3, policies=["full", "checkfreq"], out=tmp_path / "s")
    assert list(run.summary.columns) == list(sweep.summary.columns)
    pd.testing.assert_frame_equal(run.summary, sweep.summary)
    assert list(run.summary["policy"]) == ["full", "checkfreq"]
    assert {"overhead_frac_mean", "overhead_frac_ci95_half", "lost_h_mean"} <= set(run.summary)
    assert set(run.summary["reference"]) == {"full"}


def test_sweep_keys_get_numeric_si_columns_that_sort(tmp_path):
    grid = {
        "policies.*.interval": ["2 h", "15 min", "1 h"],
        "zip": {"cluster.storage.write_bandwidth": ["1 GB/s", "4 GB/s"], "run.seed": [1, 2]},
    }
    results = ftsim.sweep(SMOKE, grid, reps=2, policies="full", out=tmp_path / "s")
    runs = results.runs
    assert results.columns == ["policies.*.interval", "cluster.storage.write_bandwidth",
                               "run.seed"]  # fmt: skip
    assert list(runs.columns[:7]) == [
        "point",
        "policies.*.interval",
        "policies.*.interval_si",
        "cluster.storage.write_bandwidth",
        "cluster.storage.write_bandwidth_si",
        "run.seed",
        "run.seed_si",
    ]
    assert len(runs) == 3 * 2 * 2
    ordered = runs.sort_values("policies.*.interval_si", kind="stable")
    assert list(dict.fromkeys(ordered["policies.*.interval"])) == ["15 min", "1 h", "2 h"]
    assert sorted(set(runs["policies.*.interval"])) == ["1 h", "15 min", "2 h"]  # text: wrong
    parquet = pd.read_parquet(results.folder / "runs.parquet")
    assert parquet["policies.*.interval_si"].sort_values().unique().tolist() == [900, 3600, 7200]
    assert set(runs["cluster.storage.write_bandwidth_si"]) == {1e9, 4e9}
    pairs = zip(runs["cluster.storage.write_bandwidth_si"], runs["run.seed"], strict=True)
    assert set(pairs) == {
        (1e9, 1),
        (4e9, 2),
    }
    summary = results.summary
    assert "policies.*.interval_si" in summary and "policies.*.interval_si_mean" not in summary
    assert set(summary["policies.*.interval_si"]) == {900.0, 3600.0, 7200.0}


def test_load_reads_a_folder_back(tmp_path):
    made = ftsim.sweep(SMOKE, {"policies.*.interval": ["10 min", "1 h"]}, reps=2,
                       out=tmp_path / "s")  # fmt: skip
    loaded = ftsim.load(tmp_path / "s")
    pd.testing.assert_frame_equal(loaded.runs, made.runs)
    pd.testing.assert_frame_equal(loaded.summary, made.summary)
    pd.testing.assert_frame_equal(loaded.timeline, made.timeline)
    assert loaded.columns == ["policies.*.interval"]
    assert loaded.scenario.policy_labels == made.scenario.policy_labels
    with pytest.raises(FolderError, match="no runs.csv"):
        ftsim.load(tmp_path)


def test_load_summarises_a_folder_written_in_the_old_run_format(tmp_path):
    results = ftsim.run(SMOKE, reps=2, out=tmp_path / "r")
    pd.DataFrame({"policy": ["full"], "overhead_frac_mean": [0.1]}).to_csv(
        tmp_path / "r" / "summary.csv", index=False
    )
    old = ftsim.load(tmp_path / "r").summary
    assert list(old.columns) == list(results.summary.columns)


def test_progress_lines_on_request(tmp_path, capsys):
    ftsim.run(SMOKE, reps=2, jobs=1, out=tmp_path / "quiet")
    assert "ETA" not in capsys.readouterr().err
    ftsim.run(SMOKE, reps=2, jobs=1, out=tmp_path / "loud", progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith("run: 3/3 tasks (100%), 6/6 replications")


def test_plot_delegates_to_the_figures(tmp_path):
    results = ftsim.run(SMOKE, reps=2, out=tmp_path / "r")
    outcomes = dict(results.plot())
    assert "breakdown" in outcomes and (tmp_path / "r" / "plots" / "breakdown.png").is_file()
    # why a figure is skipped, and how to get it, in Python terms
    assert "(e.g. grid={'policies.*.interval': […]})" in outcomes["overhead_vs_interval"]
    with pytest.raises(FolderError, match=r"^point=3: no such point in "):
        results.plot(point=3)


def test_advise_is_the_search_and_folder_of_the_command_line(tmp_path, capsys):
    """``ftsim.advise`` and ``ftsim advise`` are one search writing one folder: the same
    candidates, figure and printed table (each face naming an option its way: ``reps``,
    ``--reps``)."""
    options = {"max_pls": 0.05, "reps": 2, "policies": ["full", "cpr"], "jobs": 1}
    advice = ftsim.advise(PROD50H, **options, out=tmp_path / "api")
    argv = ["advise", str(PROD50H), "--max-pls", "0.05", "--reps", "2", "--policy", "full"]
    argv += ["--policy", "cpr", "--jobs", "1", "-o", str(tmp_path / "cli")]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    text = advice.text().replace(str(tmp_path / "api"), str(tmp_path / "cli"))
    text = text.replace("(reps)", "(--reps)")
    assert printed == f"{text}\nresults: {tmp_path / 'cli'} (candidates.csv, " + (
        "frontier.pdf, frontier.png, picks.yaml)\n"
    )
    for name in ("candidates.csv", "frontier.png", "picks.yaml"):
        assert (tmp_path / "api" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes()
    assert advice.folder == tmp_path / "api"
    assert [f.name for f in advice.files] == [
        "candidates.csv", "frontier.pdf", "frontier.png", "picks.yaml", "manifest.json"
    ]  # fmt: skip
    manifest = json.loads((tmp_path / "api" / "manifest.json").read_text())
    assert manifest["command"] == "advise" and manifest["max_pls"] == 0.05
    assert list(advice.picks["policy"]) == ["full", "cpr"]
    recommended = advice.picks.loc[advice.picks["recommended"], "policy"]
    assert [advice.recommendation.policy] == list(recommended)


def test_advise_checks_its_options_before_searching(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for bad in ({"max_pls": 2}, {"max_pls": "0.1"}, {"max_memory_overhead": -1}, {"jobs": 0}):
        with pytest.raises(StudyError, match=f"{next(iter(bad))} .*must be"):
            ftsim.advise(PROD50H, **bad)
    with pytest.raises(
        StudyError, match=r"^max_pls must be a number from 0 to 1 \(got '0.1', a str\)$"
    ):
        ftsim.advise(PROD50H, max_pls="0.1")  # (the type was the problem, not the range)
    (tmp_path / "file").write_text("")
    with pytest.raises(FolderError, match="is a file"):
        ftsim.advise(PROD50H, max_pls=0.05, reps=1, out=tmp_path / "file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing else written
    advice = ftsim.advise(SMOKE, reps=1, policies="full", jobs=1)
    assert advice.folder.parent == tmp_path
    assert advice.folder.name.startswith("ftsim-smoke-advise-")


def test_plan_time_decisions_are_notices_at_the_callers_line(tmp_path):
    """CPR's fall-back is an ``ftsim.Notice`` (a ``CprFallback`` with its facts) attributed
    to the line that started the sweep, and can be filtered by its class."""
    from ftsim.notices import CprFallback

    options = {"reps": 1, "policies": "cpr", "trainer": False, "jobs": 1}
    grid = {"policies.*.target_pls": [0.002, 0.1]}
    with pytest.warns(ftsim.Notice) as caught:
        ftsim.sweep(PROD50H, grid, **options, out=tmp_path / "a")
    (fallback,) = [w for w in caught if issubclass(w.category, ftsim.Notice)]  # 0.002 only
    assert isinstance(fallback.message, CprFallback)
    assert fallback.message.policy.startswith("cpr at point 0")
    assert fallback.filename == __file__
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", ftsim.Notice)
        ftsim.sweep(PROD50H, grid, **options, out=tmp_path / "b")
    assert not [w for w in seen if issubclass(w.category, ftsim.Notice)]


# -- the sweep's options from Python: the command line's, named as Python arguments --------

GRID = {"policies.*.interval": ["20 min", "1 h"]}


def _cli_sweep(out, *options: str) -> None:
    grid = "policies.*.interval=20 min,1 h"
    argv = ["sweep", str(SMOKE), "--grid", grid, "--no-trainer", "-q", "-o", str(out), *options]
    assert main(argv) == 0


def test_a_sweep_to_a_target_halfwidth_gives_the_command_lines_rows(tmp_path):
    """``target_halfwidth``, ``max_reps``, ``reference`` and ``batch`` as ``--target-halfwidth``
    and the others: the same rows, summary and notes."""
    options = dict(reps=2, target_halfwidth=0.001, max_reps=6, reference="checkfreq", batch=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        api = ftsim.sweep(SMOKE, GRID, trainer=False, out=tmp_path / "api", **options)
    _cli_sweep(tmp_path / "cli", "--reps", "2", "--target-halfwidth", "0.001", "--max-reps",
               "6", "--reference", "checkfreq", "--batch", "2")  # fmt: skip
    for name in ("runs.csv", "summary.csv"):
        assert (tmp_path / "api" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes()
    assert api.runs["rep"].max() == 5  # replications added up to the cap
    assert set(api.summary["reference"]) == {"checkfreq"}
    assert api.manifest["config_hash"] == ftsim.load(tmp_path / "cli").manifest["config_hash"]


def test_an_interrupted_sweep_is_resumed_from_python(tmp_path):
    """A sweep whose folder lost tasks (as one interrupted) is continued with ``resume``:
    the missing tasks are computed again, the rows are those of the whole sweep; started
    over into the same folder without ``resume``, the error names the Python remedies."""
    whole = ftsim.sweep(SMOKE, GRID, reps=4, trainer=False, batch=2, out=tmp_path / "whole")
    cut = tmp_path / "cut"
    ftsim.sweep(SMOKE, GRID, reps=4, trainer=False, batch=2, out=cut)
    shards = sorted((cut / "shards").glob("p00001-*-r0000002-*.csv"))  # point 1, reps 2-3
    assert shards
    for shard in shards:  # as if the sweep had been stopped before these tasks finished
        shard.unlink()
    for merged in ("runs.csv", "runs.parquet", "summary.csv", "timeline.csv"):
        (cut / merged).unlink()
    with pytest.raises(FolderError) as held:
        ftsim.sweep(SMOKE, GRID, reps=4, trainer=False, batch=2, out=cut)
    assert f"continue it with resume='{cut}', start it over with force=True" in str(held.value)
    resumed = ftsim.sweep(SMOKE, GRID, reps=4, trainer=False, batch=2, resume=cut)
    assert resumed.folder == cut
    pd.testing.assert_frame_equal(resumed.runs, whole.runs, check_exact=True)
    assert (cut / "summary.csv").read_bytes() == (tmp_path / "whole" / "summary.csv").read_bytes()
    restarted = ftsim.sweep(SMOKE, GRID, reps=2, trainer=False, out=cut, force=True)
    assert restarted.runs["rep"].max() == 1


def test_resuming_another_sweep_says_so_in_python_terms(tmp_path):
    ftsim.sweep(SMOKE, GRID, reps=2, trainer=False, out=tmp_path / "s")
    with pytest.raises(FolderError, match=rf"^resume='{tmp_path / 's'}': the folder holds a diff"):
        ftsim.sweep(SMOKE, GRID, reps=3, trainer=False, resume=tmp_path / "s")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_reps": 0}, "max_reps must be a whole number of at least 1 (got 0)"),
        ({"batch": 2.5}, "batch must be a whole number of at least 1 (got 2.5)"),
        ({"target_halfwidth": -1}, "target_halfwidth must be a positive number (got -1)"),
        ({"dask_address": "tcp://x:1"}, "dask_address needs executor='dask'"),
        (
            {"resume": "a", "out": "b"},
            "resume continues the sweep in its own folder; leave out out",
        ),
        ({"resume": "a", "force": True}, "force does not apply to resume"),
    ],
)
def test_bad_sweep_options_are_named_as_python_arguments(options, message):
    """Checked before anything is planned or written, with the command line's checks
    (``test_bad_inputs``: the same ones named as flags)."""
    with pytest.raises(StudyError) as bad:
        ftsim.sweep(SMOKE, GRID, **options)
    assert str(bad.value).startswith(message)


def test_run_and_advise_write_into_any_folder_with_force(tmp_path):
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("keep")
    with pytest.raises(FolderError, match=r"or pass force=True to write into it"):
        ftsim.run(SMOKE, reps=2, out=foreign)
    assert ftsim.run(SMOKE, reps=2, out=foreign, force=True).runs["rep"].max() == 1
    other = tmp_path / "other"
    other.mkdir()
    (other / "mine.txt").write_text("keep")
    with pytest.raises(FolderError, match=r"force=True"):
        ftsim.advise(SMOKE, reps=2, policies="full", out=other)
    advice = ftsim.advise(SMOKE, reps=2, policies="full", out=other, force=True)
    assert (other / "candidates.csv").is_file() and advice.folder == other
    assert (foreign / "mine.txt").read_text() == (other / "mine.txt").read_text() == "keep"


def test_the_command_line_names_the_same_checks_as_flags(tmp_path, capsys):
    """The Python spelling stays inside the API's calls: the command line's messages name
    its flags, also after a call of the API in the same process."""
    with pytest.raises(StudyError):
        ftsim.sweep(SMOKE, GRID, max_reps=0)
    argv = ["sweep", str(SMOKE), "--max-reps", "0", "-o", str(tmp_path / "x")]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "ftsim: --max-reps must be a whole number of at least 1 (got 0)\n"
    )


def test_a_grid_key_replacing_the_files_is_said_in_python_terms(tmp_path):
    """The note of ``test_overrides``' grid key that replaces the file's, from Python."""
    grid = {"policies.*.interval": ["1 h", "2 h"]}
    with pytest.warns(ftsim.Notice) as caught:
        ftsim.sweep(SCENARIOS / "cpr_pls.yaml", grid, reps=1, trainer=False, out=tmp_path / "s")
    notes = [str(w.message) for w in caught if issubclass(w.category, ftsim.Notice)]
    assert notes[0].startswith(
        "grid policies.*.interval replaces the scenario's sweep.grid key policies.*.target_pls"
    )


def test_numpy_numbers_are_taken_as_python_ones_and_text_is_not_a_count(tmp_path):
    """A notebook's np.int64 crashed deep in YAML or pydantic (a sweep left a half-made
    folder that its corrected call could not reuse); reps='5' passed for 5, 2.5 was refused
    in the schema's words at run.replications."""
    import numpy as np

    smoke = SCENARIOS / "smoke.yaml"
    grid, overrides = {"cluster.emb_ps": np.array([2, 4])}, {"cluster.trainers": np.int64(8)}
    numpy = ftsim.sweep(smoke, grid, overrides, reps=np.int64(2), seed=np.int64(3),
                        jobs=np.int64(1), trainer=False, out=tmp_path / "numpy")  # fmt: skip
    plain = ftsim.sweep(smoke, {"cluster.emb_ps": [2, 4]}, {"cluster.trainers": 8}, reps=2,
                        seed=3, jobs=1, trainer=False, out=tmp_path / "plain")  # fmt: skip
    assert (tmp_path / "numpy" / "runs.csv").read_bytes() == (
        tmp_path / "plain" / "runs.csv"
    ).read_bytes()
    assert numpy.manifest["config_hash"] == plain.manifest["config_hash"]
    for value, said in (("5", "'5', a str"), (2.5, "2.5")):
        with pytest.raises(StudyError) as refused:
            ftsim.run(smoke, trainer=False, reps=value)
        assert str(refused.value) == f"reps must be a whole number of at least 1 (got {said})"


def test_the_manifest_records_the_python_call_as_a_command_records_its_command_line(tmp_path):
    """It had ``argv: null``: nothing said which grid, overrides or options made the folder."""
    grid = {"policies.*.interval": ["10 min", "20 min"]}
    out = tmp_path / "s"
    results = ftsim.sweep(SCENARIOS / "smoke.yaml", grid, reps=2, trainer=False, jobs=1, out=out)
    call = (
        f"ftsim.sweep({str(SCENARIOS / 'smoke.yaml')!r}, {grid!r}, reps=2, trainer=False, "
        f"jobs=1, out={str(out)!r})"
    )
    assert results.manifest["argv"] == [call]
    assert [s["argv"] for s in results.manifest["sessions"]] == [[call]]
    advice = ftsim.advise(SMOKE, max_pls=0.1, reps=2, out=tmp_path / "a")
    manifest = json.loads((advice.folder / "manifest.json").read_text())
    assert manifest["argv"] == [
        f"ftsim.advise({str(SMOKE)!r}, max_pls=0.1, reps=2, out={str(tmp_path / 'a')!r})"
    ]
