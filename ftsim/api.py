"""The Python API: a study from scenario to tables and figures, as the command line does it.

``ftsim run`` and ``ftsim sweep`` are thin layers over the same study layer
(:mod:`ftsim.experiments.study`), and ``ftsim advise`` over the same search
(:mod:`ftsim.experiments.advise`): the same validation, the same folder and files, the
same rows. Every function here writes a results folder (a temporary one unless ``out`` is
given) and returns what it holds: a :class:`Results` read back from it (run, sweep), or the
advice whose table and figure were written there, so what a notebook sees is exactly what
the files hold. Documented in ``docs/python_api.md``.

Bad input raises the command line's errors: ``ScenarioError`` (every problem of the
scenario, overrides or grid, located as ``FILE: dotted.path: what is wrong``),
``StudyError`` (an unknown policy name, a bad option value) and ``FolderError`` (an
output folder that may not be written).

Decisions taken for the user when a study is planned (CPR falling back to full recovery,
a scenario's grid key replaced by the one given) are warnings of the class
:class:`ftsim.Notice` (:mod:`ftsim.notices`), attributed to the caller's line.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from ftsim.experiments.advise import Advice
    from ftsim.scenario.schema import Scenario


def load_scenario(path: str | Path, overrides: Mapping[str, object] | None = None) -> Scenario:
    """The validated scenario of the file ``path``, with ``overrides`` (dotted key →
    value, as ``--set key=value``: ``{"policies.0.interval": "30 min"}``) applied; a
    ``ScenarioError`` locates every problem."""
    from ftsim.policies import catalog  # noqa: F401 (the kinds a scenario may name)
    from ftsim.scenario.loader import load_scenario as load

    return load(path, _assignments(overrides))


def run(
    scenario: str | Path | Scenario,
    overrides: Mapping[str, object] | None = None,
    *,
    reps: int | None = None,
    seed: int | None = None,
    policies: str | Sequence[str] | None = None,
    trainer: bool = True,
    jobs: int | None = None,
    out: str | Path | None = None,
    force: bool = False,
    progress: bool = False,
) -> Results:
    """Run every policy (or those labelled ``policies``) of ``scenario`` (a file or a loaded
    scenario) over its replications, as ``ftsim run`` does, into the folder ``out``.

    ``reps``, ``seed`` and ``trainer=False`` (timing only) stand for the overrides
    ``run.replications``, ``run.seed`` and ``trainer.enabled: false``; ``jobs`` worker
    processes (default: the CPUs); ``progress`` prints progress lines on standard error.
    ``out`` may be new, empty or an earlier run's folder (replaced); ``force`` writes into
    any other folder (files of the same names are replaced).
    """
    from ftsim.experiments import study

    reps, seed, jobs = _plain(reps), _plain(seed), _plain(jobs)
    _check_arguments(scenario, jobs, trainer, out, progress)
    _check_type("force", force, bool, "True or False")
    plan = study.plan(
        scenario,
        _assignments(overrides, reps, seed, trainer),
        policies=_labels(policies),
        command="run",
    )
    call = _call(
        "run", scenario, overrides, reps=reps, seed=seed, policies=policies, trainer=trainer,
        jobs=jobs, out=out, force=force,
    )  # fmt: skip
    return _execute(plan, out, progress, jobs=jobs, force=force, argv=call)


def sweep(
    scenario: str | Path | Scenario,
    grid: Mapping[str, object],
    overrides: Mapping[str, object] | None = None,
    *,
    reps: int | None = None,
    seed: int | None = None,
    policies: str | Sequence[str] | None = None,
    trainer: bool = True,
    reference: str | None = None,
    target_halfwidth: float | None = None,
    max_reps: int = 1000,
    jobs: int | None = None,
    executor: str = "process",
    dask_address: str | None = None,
    batch: int = 10,
    out: str | Path | None = None,
    resume: str | Path | None = None,
    force: bool = False,
    progress: bool = False,
) -> Results:
    """Run the policies of ``scenario`` at every point of ``grid``, as ``ftsim sweep`` does.

    ``grid`` maps dotted keys to lists of values (``{"policies.*.interval": ["30 min",
    "1 h"]}``), points being their cartesian product; an entry ``"zip"`` maps keys to
    lists that vary together (``{"zip": {"failures.0.job_mtbf": [...], "job.training":
    [...]}}``), as in a scenario's ``sweep:`` section, whose entries these add to or
    replace. Each swept key is a column of the results (its values as text) followed, for
    a numeric field, by ``<key>_si``: the value in SI base units (seconds, bytes, bytes/s).
    ``reference``: the policy of the paired differences (default: the first);
    ``target_halfwidth``: replications are added (up to ``max_reps``) until the 95% CI
    half-width of ``overhead_frac`` is at most this. ``executor`` is "process" (local
    workers) or "dask" (a local Dask cluster, or the scheduler at ``dask_address``);
    ``batch`` replications per task. ``out`` must be new or empty (``force``: any folder,
    an earlier sweep's started over); ``resume`` is the folder of an interrupted sweep to
    continue, with the same scenario, grid and options. The other arguments are those of
    :func:`run`.
    """
    from ftsim.experiments import study

    reps, seed, jobs, batch = _plain(reps), _plain(seed), _plain(jobs), _plain(batch)
    max_reps, target_halfwidth, grid = _plain(max_reps), _plain(target_halfwidth), _plain(grid)
    _check_arguments(scenario, jobs, trainer, out, progress)
    _check_type("resume", resume, str | Path | None, "a folder's path or None")
    _check_type("force", force, bool, "True or False")
    study.check_sweep_options(
        jobs=jobs,
        batch=batch,
        max_reps=max_reps,
        target_halfwidth=target_halfwidth,
        executor=executor,
        dask_address=dask_address,
        out=out,
        resume=resume,
        force=force,
    )
    if not isinstance(grid, Mapping):
        raise study.StudyError(f"grid must map dotted keys to lists of values (got {grid!r})")
    plan = study.plan(
        scenario,
        _assignments(overrides, reps, seed, trainer),
        grid,
        _labels(policies),
        reference=reference,
        target_halfwidth=target_halfwidth,
        max_reps=max_reps,
    )
    call = _call(
        "sweep", scenario, grid, overrides, reps=reps, seed=seed, policies=policies,
        trainer=trainer, reference=reference, target_halfwidth=target_halfwidth,
        max_reps=max_reps, jobs=jobs, executor=executor, dask_address=dask_address,
        batch=batch, out=out, resume=resume, force=force,
    )  # fmt: skip
    return _execute(
        plan,
        resume if resume is not None else out,
        progress,
        jobs=jobs,
        force=force,
        resume=resume is not None,
        executor=executor,
        dask_address=dask_address,
        batch=batch,
        argv=call,
    )


def advise(
    scenario: str | Path | Scenario,
    overrides: Mapping[str, object] | None = None,
    *,
    max_pls: float | None = None,
    max_memory_overhead: float | None = None,
    reps: int | None = None,
    seed: int | None = None,
    policies: str | Sequence[str] | None = None,
    jobs: int | None = None,
    out: str | Path | None = None,
    force: bool = False,
) -> Advice:
    """The cheapest setting of each policy of ``scenario`` within the limits, searched with
    the simulator (timing only), as ``ftsim advise`` does, into the folder ``out``.

    ``max_pls`` bounds the mean of the time model's ``pls_model``; ``max_memory_overhead``
    the extra memory per embedding PS as a share of its shard; ``reps`` and ``seed`` are
    the replications of every candidate (default: the scenario's) and their seed; ``jobs``
    worker processes (default: the CPUs; the results do not depend on it). ``out`` must be
    new, empty or an earlier advice's (``force``: any folder); None makes a temporary one.
    The returned :class:`~ftsim.experiments.advise.Advice` has ``.picks`` and
    ``.candidates`` (DataFrames), ``.recommendation``, ``.text()`` (the table the command
    line prints), ``.figure()`` (the frontier) and ``.folder``. The other arguments are
    those of :func:`run`.
    """
    from ftsim.experiments import advise as search
    from ftsim.experiments.pool import default_jobs

    reps, seed, jobs = _plain(reps), _plain(seed), _plain(jobs)
    max_pls, max_memory_overhead = _plain(max_pls), _plain(max_memory_overhead)
    _check_type("out", out, str | Path | None, "a folder's path or None")
    _check_type("force", force, bool, "True or False")
    _check_count("reps", reps, 1)
    _check_count("seed", seed, 0)
    call = _call(
        "advise", scenario, overrides, max_pls=max_pls,
        max_memory_overhead=max_memory_overhead, reps=reps, seed=seed, policies=policies,
        jobs=jobs, out=out, force=force,
    )  # fmt: skip
    jobs = default_jobs() if jobs is None else jobs
    search.check_options(max_pls, max_memory_overhead, jobs)
    return search.execute(
        scenario,
        _assignments(overrides),
        None if out is None else Path(out),
        force=force,
        argv=call,
        default=_temporary_advice_folder,
        max_pls=max_pls,
        max_memory_overhead=max_memory_overhead,
        reps=reps,
        seed=seed,
        policies=_labels(policies) or None,
        jobs=jobs,
    )


def _temporary_advice_folder(advice: Advice, started) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"ftsim-{advice.scenario}-advise-"))


def load(run_dir: str | Path) -> Results:
    """The results of a run or sweep folder written by ftsim (the API or the command line);
    ``FolderError`` if it is not one."""
    from ftsim.experiments.folders import MANIFEST, FolderError, check_finished, read_manifest
    from ftsim.experiments.lock import settle

    _check_type("run_dir", run_dir, str | Path, "a folder's path")
    folder = Path(run_dir)
    if not folder.is_dir():
        raise FolderError(f"{folder}: {'not a folder' if folder.exists() else 'no such folder'}")
    settle(folder)  # the moves of a command killed while making them are completed
    if (folder / MANIFEST).is_file():
        check_finished(folder, read_manifest(folder))
    if not (folder / "runs.csv").is_file():
        raise FolderError(f"{folder}: no runs.csv (not a run or sweep folder)")
    return Results(folder, read_manifest(folder))


@dataclass
class Results:
    """A run or sweep folder read back: tidy pandas DataFrames with numeric columns (units
    in the names: ``_h`` hours, ``_frac`` fractions, ``_si`` SI base units)."""

    folder: Path
    """Where the results are (``runs.csv``, ``summary.csv``, ``timeline.csv``,
    ``scenario.yaml``, ``manifest.json``); ``plot`` writes into ``folder / "plots"``."""
    manifest: dict = field(repr=False)
    """What ran: command, scenario, seed, swept ``columns`` and ``points``, versions."""

    @property
    def columns(self) -> list[str]:
        """The swept keys (empty for a run): the point columns of ``runs`` and ``summary``."""
        return list(self.manifest.get("columns", []))

    @cached_property
    def runs(self) -> pd.DataFrame:
        """One row per point × policy × replication (``runs.csv``; ``runs.parquet`` holds
        the same table)."""
        return _read_csv(self.folder / "runs.csv")

    @cached_property
    def summary(self) -> pd.DataFrame:
        """One row per point × policy: means and 95% t-intervals over the finished
        replications, paired differences with the reference policy (``summary.csv``; its
        columns are listed in ``docs/python_api.md``). Computed from ``runs`` for folders
        written before run and sweep shared one summary format."""
        from ftsim.experiments.stats import summarize

        path = self.folder / "summary.csv"
        if path.is_file():
            summary = _read_csv(path)
            if "overhead_frac_mean" in summary:
                return summary
        return summarize(self.runs, self.columns, self.manifest.get("reference"))

    @cached_property
    def timeline(self) -> pd.DataFrame:
        """Phases and failures of replication 0 of every point and policy."""
        import pandas as pd

        path = self.folder / "timeline.csv"
        if not path.is_file() or path.stat().st_size == 0:
            return pd.DataFrame()
        return _read_csv(path)

    @cached_property
    def scenario(self) -> Scenario:
        """The resolved scenario (``scenario.yaml``: a sweep's base scenario). No warnings:
        the file spells out every default, and the run was warned about when it started."""
        from ftsim.scenario.loader import read_yaml, validate_scenario

        path = self.folder / "scenario.yaml"
        return validate_scenario(read_yaml(path), path, warn=False)

    def plot(self, *args, **options) -> list[tuple[str, str]]:
        """Draw the figures this folder supports into ``folder / "plots"``, as ``ftsim plot``
        does (arguments: those of :func:`ftsim.plots.plot_run`); returns per figure the
        files written or why it was skipped."""
        from ftsim.plots import plot_run

        return plot_run(self.folder, *args, **options)


def _read_csv(path: Path) -> pd.DataFrame:
    """A results CSV as a DataFrame, read by pyarrow as ``runs.parquet`` was converted (every
    float exactly as written, whatever the pandas version); empty cells are missing values,
    as pandas reads them."""
    import pyarrow.csv as pa_csv

    options = pa_csv.ConvertOptions(strings_can_be_null=True)
    return pa_csv.read_csv(path, convert_options=options).to_pandas()


CALL_DEFAULTS = {
    "trainer": True,
    "force": False,
    "max_reps": 1000,
    "executor": "process",
    "batch": 10,
}
"""The defaults of :func:`run`'s and :func:`sweep`'s arguments other than None."""


def _call(function: str, scenario, *arguments, **keywords) -> list[str]:
    """How the Python API was called, as the manifest's ``argv`` records it (for a command,
    its command line): ``["ftsim.sweep('scenarios/prod50h.yaml', {...}, reps=6)"]``, with
    the arguments given other than by default (None, :data:`CALL_DEFAULTS`)."""
    from ftsim.scenario.schema import Scenario

    def shown(value) -> str:
        return repr(str(value)) if isinstance(value, Path) else repr(value)

    where = f"<scenario {scenario.name}>" if isinstance(scenario, Scenario) else shown(scenario)
    parts = [where, *(shown(a) for a in arguments if a is not None)]
    parts += [
        f"{name}={shown(value)}"
        for name, value in keywords.items()
        if value is not None and not (name in CALL_DEFAULTS and value == CALL_DEFAULTS[name])
    ]
    return [f"ftsim.{function}({', '.join(parts)})"]


def _execute(plan, out, progress: bool, **options) -> Results:
    """Execute ``plan`` into ``out`` (default: a new temporary folder) with the options of
    :func:`ftsim.experiments.study.execute`, and read the results back."""
    from ftsim.experiments import study
    from ftsim.experiments.progress import Progress

    if out is None:
        out = tempfile.mkdtemp(prefix=f"ftsim-{plan.base.name}-")
    reporter = Progress(plan.command) if progress else None
    try:
        outcome = study.execute(plan, Path(out), progress=reporter, say=_stderr, **options)
    finally:
        if reporter is not None:
            reporter.close()
    for notice in study.result_warnings(outcome):  # (unfinished replications, ...)
        study.warn_caller(notice)
    results = Results(outcome.folder, json.loads((outcome.folder / "manifest.json").read_text()))
    results.scenario = plan.base
    return results


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _check_arguments(scenario, jobs, trainer, out, progress) -> None:
    """StudyError naming an argument of :func:`run` or :func:`sweep` of a wrong type or
    value (a TypeError from deep inside said neither which argument nor what it wants)."""
    from ftsim.experiments.study import StudyError
    from ftsim.scenario.schema import Scenario

    _check_type("scenario", scenario, str | Path | Scenario, "a file's path or a Scenario")
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise StudyError(f"jobs must be a whole number of at least 1 (got {jobs!r})")
    _check_type("trainer", trainer, bool, "True or False")
    _check_type("out", out, str | Path | None, "a folder's path or None")
    _check_type("progress", progress, bool, "True or False")


def _plain(value):
    """``value`` with NumPy's scalars and arrays as Python's numbers and lists and paths as
    text, inside mappings and lists too: a notebook's ``np.int64(2)`` crashed deep in YAML or
    pydantic (a sweep's half-made folder left behind). NumPy is not imported for it."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if type(value).__module__ == "numpy":  # a scalar (.item()) or an array (.tolist())
        return _plain(value.tolist())
    return value


def _check_count(name: str, value, least: int) -> None:
    """StudyError unless ``value`` is None or a whole number of at least ``least`` (the text
    '5' was taken for 5, and 2.5 refused by the scenario's schema in its own words)."""
    from ftsim.experiments.study import StudyError

    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        plain = isinstance(value, int | float) and not isinstance(value, bool)
        kind = "" if plain else f", a {type(value).__name__}"
        raise StudyError(f"{name} must be a whole number of at least {least} (got {value!r}{kind})")


def _check_type(name: str, value, kinds, what: str) -> None:
    from ftsim.experiments.study import StudyError

    if not isinstance(value, kinds):
        raise StudyError(f"{name} must be {what} (got {value!r})")


def _labels(policies: str | Sequence[str] | None) -> list[str]:
    """Policy labels from one label, a list of them or None (every policy)."""
    if policies is None:
        return []
    if isinstance(policies, str):
        return [policies]
    _check_type("policies", policies, Sequence, "a policy label, a list of them or None")
    return list(policies)


def _assignments(
    overrides: Mapping[str, object] | None,
    reps: int | None = None,
    seed: int | None = None,
    trainer: bool = True,
) -> list[str]:
    """The ``--set key=value`` texts of ``overrides`` and the shorthand arguments: each
    value written as the YAML that reads back as it, so that it is validated (and its
    errors located) exactly as on the command line."""
    from ftsim.experiments.study import StudyError

    if overrides is not None and not isinstance(overrides, Mapping):
        raise StudyError(f"overrides must map dotted keys to values (got {overrides!r})")
    _check_count("reps", reps, 1)
    _check_count("seed", seed, 0)
    settings = dict(overrides or {})
    shorthands = (
        ("reps", reps is not None, "run.replications", reps),
        ("seed", seed is not None, "run.seed", seed),
        ("trainer=False", not trainer, "trainer.enabled", False),
    )
    for argument, given, key, value in shorthands:
        if given:
            if key in settings:  # the argument silently won over the override
                raise StudyError(f"{argument} and overrides[{key!r}] both given: give one")
            settings[key] = value
    return [f"{key}={_yaml(value)}" for key, value in settings.items()]


def _yaml(value: object) -> str:
    """``value`` as one line of YAML that reads back as ``value`` (paths as text, NumPy's
    numbers and arrays as Python's)."""
    import yaml

    text = yaml.safe_dump(_plain(value), default_flow_style=True, sort_keys=False, width=2**31 - 1)
    return text.removesuffix("\n").removesuffix("\n...").strip()
