"""The study layer: a run or a sweep from scenario to results folder and manifest.

``ftsim run``, ``ftsim sweep`` and the Python API (:mod:`ftsim.api`) all go through here:
:func:`plan` validates the scenario, overrides, grid and policy selection into a
:class:`~ftsim.experiments.sweep.Plan`; :func:`execute` runs its tasks into a
:class:`~ftsim.experiments.store.RunStore` and writes the merged results, the one summary
format (:func:`ftsim.experiments.stats.summarize`), the resolved ``scenario.yaml`` and
``manifest.json``. A run is a study of one point: its rows are those of a sweep of one
point without the ``point`` column.

A sweep's folder is created at once and keeps its shards (it can be resumed); a run writes
its folder only when it has finished (its shards are staged in a hidden folder, removed at
the end or after an interruption), so an interrupted run leaves nothing.

This module imports nothing heavy until a study is planned.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from ftsim.experiments.store import RunStore
    from ftsim.experiments.sweep import Plan
    from ftsim.scenario.schema import Scenario


class StudyError(Exception):
    """An option a study cannot use (an unknown policy name, a bad worker count): printed
    as is, exit status 2."""


class StudyInterrupted(KeyboardInterrupt):
    """Ctrl-C during a study, after what was kept is settled: ``folder`` holds the tasks
    finished so far (a sweep, which can be resumed) or nothing (a run, removed)."""

    def __init__(self, folder: Path, kept_tasks: int, tasks: int, kept_reps: int, reps: int):
        super().__init__(f"interrupted: {kept_tasks} of {tasks} tasks kept in {folder}")
        self.folder, self.kept_tasks, self.tasks = folder, kept_tasks, tasks
        self.kept_reps, self.reps = kept_reps, reps


@dataclass
class Outcome:
    """A finished study: its plan, folder, summary and how many replications it computed
    and found already stored (a resumed sweep)."""

    plan: Plan
    folder: Path
    summary: pd.DataFrame
    computed: int
    reused: int


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def plan(
    scenario: Path | str | Scenario,
    overrides: Sequence[str] = (),
    grid: Sequence[str] | Mapping[str, object] = (),
    policies: Sequence[str] = (),
    *,
    command: str = "sweep",
    reference: str | None = None,
    target_halfwidth: float | None = None,
    max_reps: int = 1000,
) -> Plan:
    """The validated plan of a run (``command`` "run": one point) or a sweep; ScenarioError
    locating every problem, StudyError for an unknown policy name."""
    from ftsim.experiments.sweep import plan_sweep

    return plan_sweep(
        scenario,
        list(overrides),
        grid,
        list(policies),
        reference,
        target_halfwidth,
        max_reps,
        command,
    )


def default_folder(plan: Plan, started: datetime) -> Path:
    """``run.output/<scenario>/<UTC time>_<config hash>`` (``_sweep`` appended for a sweep)."""
    suffix = "_sweep" if plan.command == "sweep" else ""
    stamp = f"{started:%Y%m%dT%H%M%SZ}_{plan.config_hash}{suffix}"
    return Path(plan.base.run.output) / plan.base.name / stamp


def execute(
    plan: Plan,
    out: Path | None = None,
    *,
    force: bool = False,
    resume: bool = False,
    executor: str = "process",
    jobs: int | None = None,
    dask_address: str | None = None,
    batch: int = 10,
    argv: list[str] | None = None,
    progress=None,
    say: Callable[[str], None] | None = _stderr,
) -> Outcome:
    """Run ``plan`` into the folder ``out`` (default: :func:`default_folder`; with
    ``resume``, the sweep folder to continue) and write its results.

    ``progress`` receives the tasks (:class:`ftsim.experiments.progress.Progress`);
    ``say`` the notes on decisions taken for the user (workers lowered, shards discarded,
    failure-log rows skipped), None to drop them. Ctrl-C raises :class:`StudyInterrupted`
    once what was kept is settled.
    """
    from ftsim.experiments import sweep
    from ftsim.experiments.store import RunStore
    from ftsim.sim.failures import source_notes

    say = say or (lambda line: None)
    for line in source_notes(plan.base):  # e.g. the rows a failure log skipped
        say(line)
    if executor == "dask" and dask_address:
        sweep.check_dask_scheduler(dask_address)
    started = datetime.now(UTC)
    run, created = plan.command == "run", False
    if resume:
        store = RunStore.resume(out, plan.config_hash)
        if store.discarded:
            say(
                f"ftsim: {len(store.discarded)} shard file(s) in {store.shards} are not "
                "recorded in SHA256SUMS or fail their checksum (truncated or edited?); "
                "their tasks are computed again"
            )
    else:
        out = Path(out) if out is not None else default_folder(plan, started)
        created = not out.exists()
        if run:
            store = RunStore.staged(out, force)
        else:
            store = RunStore.create(out, sweep.manifest(plan, argv, started.isoformat()), force)
    if not run:
        _write_resolved(store.root / "scenario.yaml", plan.resolved)
    if executor == "process" or dask_address is None:
        jobs, note = sweep.local_workers(plan, jobs, batch)
        if note:
            say(f"ftsim: {note}")
    try:
        computed, reused = sweep.run_sweep(
            plan,
            store,
            executor=executor,
            jobs=jobs,
            dask_address=dask_address,
            batch=batch,
            progress=progress,
        )
        summary = sweep.finish(plan, store)
        for line in sweep.short_of_target(plan, summary):
            say(f"ftsim: {line}")
    except BaseException as exc:
        if run:  # a run keeps nothing of an unfinished attempt
            store.discard_shards()
            if created:
                _remove_empty(store.root)
        if isinstance(exc, KeyboardInterrupt):
            raise _interrupted(plan, store, batch) from None
        raise
    _finish_folder(plan, store, started, argv, computed, reused)
    return Outcome(plan, store.root, summary, computed, reused)


def _finish_folder(plan, store: RunStore, started, argv, computed: int, reused: int) -> None:
    """The manifest (and for a run the resolved scenario) once the results are merged."""
    from ftsim.experiments.folders import result_checksums
    from ftsim.experiments.output import write_json
    from ftsim.experiments.sweep import manifest

    finished = datetime.now(UTC).isoformat()
    session = {
        "argv": argv,
        "started_utc": started.isoformat(),
        "finished_utc": finished,
        "computed_reps": computed,
        "reused_reps": reused,
    }
    if plan.command == "run":
        _write_resolved(store.root / "scenario.yaml", plan.resolved)
        fields = manifest(plan, argv, started.isoformat()) | {"sessions": [session]}
        store.discard_shards()
    else:
        fields = store.manifest() | {"sessions": [*store.manifest()["sessions"], session]}
    fields.update(finished_utc=finished, files=result_checksums(store.root))
    write_json(store.root / "manifest.json", fields)


def _interrupted(plan: Plan, store: RunStore, batch: int) -> StudyInterrupted:
    from ftsim.experiments.sweep import n_tasks

    total = sum(p.scenario.run.replications for p in plan.points) * len(plan.policies)
    if plan.command == "run":
        return StudyInterrupted(store.root, 0, n_tasks(plan, batch), 0, total)
    done = [key for key in store.done() if (store.shards / f"{key.name}.csv").exists()]
    reps = sum(len(key.reps) for key in done)
    return StudyInterrupted(store.root, len(done), n_tasks(plan, batch), reps, total)


def _remove_empty(folder: Path) -> None:
    """Remove ``folder`` if nothing is left in it."""
    with contextlib.suppress(OSError):
        folder.rmdir()


def _write_resolved(path: Path, scenario: Scenario) -> None:
    """The resolved scenario as YAML (every default filled in, in units)."""
    import yaml

    from ftsim.experiments.output import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))
