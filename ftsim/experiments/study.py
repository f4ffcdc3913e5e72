"""The study layer: a run or a sweep from scenario to results folder and manifest.

``ftsim run``, ``ftsim sweep`` and the Python API (:mod:`ftsim.api`) all go through here:
:func:`plan` validates the scenario, overrides, grid and policy selection into a
:class:`~ftsim.experiments.sweep.Plan`; :func:`execute` runs its tasks into a
:class:`~ftsim.experiments.store.RunStore` and writes the merged results, the one summary
format (:func:`ftsim.experiments.stats.summarize`), the resolved ``scenario.yaml`` and
``manifest.json``. A run is a study of one point: its rows are those of a sweep of one
point without the ``point`` column.

The output folder is held with a lock while a study writes it. A sweep's folder is created
at once and keeps its shards (it can be resumed); a run is staged inside its folder and
moved into place when it has finished (:class:`ftsim.experiments.output.StagedFolder`), so
an interrupted run leaves nothing, and an earlier run's files intact.

This module imports nothing heavy until a study is planned.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ftsim.experiments import interrupts
from ftsim.options import named, option

if TYPE_CHECKING:
    import pandas as pd

    from ftsim.experiments.store import RunStore
    from ftsim.experiments.sweep import Plan
    from ftsim.scenario.schema import Scenario


EXECUTORS = ("process", "dask")
"""Where a sweep's tasks may run: local worker processes, or a Dask cluster."""


class StudyError(Exception):
    """An option a study cannot use (an unknown policy name, a bad worker count): printed
    as is, exit status 2."""


class StudyInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP) during a study, after what was kept is settled:
    ``folder`` holds the tasks finished so far (a sweep, which can be resumed); a run's
    folder holds its results only if they were ``committed`` before the signal. ``tasks``
    is None when the number of tasks is not known in advance (a sweep that adds replications
    until a target half-width: ``reps`` is then the most it may run)."""

    def __init__(
        self,
        folder: Path,
        kept_tasks: int,
        tasks: int | None,
        kept_reps: int,
        reps: int,
        committed: bool = False,
    ):
        self.folder, self.kept_tasks, self.tasks = folder, kept_tasks, tasks
        self.kept_reps, self.reps, self.committed = kept_reps, reps, committed
        super().__init__(f"interrupted: {self.kept()} kept in {folder}")

    def kept(self) -> str:
        """What was kept, e.g. "12 of 36 tasks (120 of 360 replications)"."""
        of = "" if self.tasks is None else f" of {self.tasks}"
        most = "at most " if self.tasks is None else ""
        return f"{self.kept_tasks}{of} tasks ({self.kept_reps} of {most}{self.reps} replications)"


@dataclass
class Outcome:
    """A finished study: its plan, folder, summary (as records: ``summary.csv``'s rows) and
    how many replications it computed and found already stored (a resumed sweep)."""

    plan: Plan
    folder: Path
    records: list[dict]
    computed: int
    reused: int
    copied: int = 0
    """Of the computed replications, those written from the simulation of the same policy
    at an earlier point of the sweep (the point changed only other policies' fields)."""

    @property
    def summary(self) -> pd.DataFrame:
        """The summary as a DataFrame (pandas is imported only when it is asked for)."""
        import pandas as pd

        return pd.DataFrame(self.records)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


PACKAGE = Path(__file__).resolve().parents[1]
"""The ftsim package's folder: frames from its files are not the caller's."""


def warn_caller(notice: Warning) -> None:
    """Issue ``notice`` as a warning attributed to the first frame outside the ftsim
    package (the user's line in a script or notebook cell, not ftsim's own), so that it
    says where the study was started and Python's once-per-location filter counts the
    caller's lines."""
    frame, level = sys._getframe(1), 2
    while frame is not None and Path(frame.f_code.co_filename).resolve().is_relative_to(PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(notice, stacklevel=level - 1 if frame is None else level)


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


def check_sweep_options(
    *,
    jobs: int | None = None,
    batch: int = 10,
    max_reps: int = 1000,
    target_halfwidth: float | None = None,
    executor: str = "process",
    dask_address: str | None = None,
    out: Path | str | None = None,
    resume: Path | str | None = None,
    force: bool = False,
) -> None:
    """StudyError naming the first option of a sweep (as the caller spells it:
    :mod:`~ftsim.options`) with a value or a combination it cannot use."""
    import math

    from ftsim.scenario.schema import MAX_REPLICATIONS

    for name, value in (("jobs", jobs), ("batch", batch), ("max_reps", max_reps)):
        whole = isinstance(value, int) and not isinstance(value, bool)
        if value is not None and not (whole and value >= 1):
            raise StudyError(f"{named(name)} must be a whole number of at least 1 (got {value!r})")
    if max_reps > MAX_REPLICATIONS:
        raise StudyError(
            f"{named('max_reps')} must be at most {MAX_REPLICATIONS:,} (got {max_reps})"
        )
    width = target_halfwidth
    number = isinstance(width, int | float) and not isinstance(width, bool)
    if width is not None and not (number and math.isfinite(width) and width > 0):
        raise StudyError(f"{named('target_halfwidth')} must be a positive number (got {width!r})")
    if resume is not None and out is not None and Path(resume) != Path(out):
        raise StudyError(
            f"{named('resume')} continues the sweep in its own folder; leave out {named('out')}"
        )
    if resume is not None and force:
        raise StudyError(
            f"{named('force')} does not apply to {named('resume')} (it only continues a sweep)"
        )
    if executor not in EXECUTORS:
        choices = ", ".join(EXECUTORS)
        raise StudyError(f"{named('executor')} must be one of {choices} (got {executor!r})")
    if dask_address and executor != "dask":
        raise StudyError(f"{named('dask_address')} needs {option('executor', 'dask')}")


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
    ``resume``, the sweep folder to continue), held with a lock, and write its results.

    ``progress`` receives the tasks (:class:`ftsim.experiments.progress.Progress`);
    ``say`` the notes on decisions taken for the user (workers lowered, shards discarded,
    failure-log rows skipped), None to drop them; the plan's notices (a CPR fall-back, a
    replaced grid key) are issued as warnings. Ctrl-C raises :class:`StudyInterrupted`
    once what was kept is settled.
    """
    from ftsim.experiments import sweep
    from ftsim.experiments.lock import locked_folder
    from ftsim.experiments.pool import default_jobs
    from ftsim.sim.failures import source_notes

    say = say or (lambda line: None)
    for line in source_notes(plan.base):  # e.g. the rows a failure log skipped
        say(line)
    for notice in plan.notes:
        warn_caller(notice)
    if executor == "dask" and dask_address:
        sweep.check_dask_scheduler(dask_address)
    started = datetime.now(UTC)
    out = Path(out) if out is not None else default_folder(plan, started)
    if executor == "process" or dask_address is None:
        jobs, note = sweep.local_workers(plan, jobs, batch)
        if note:
            say(f"ftsim: {note}")
    # the workers start before the folder is prepared (a folder that cannot be used ends
    # them), and compute a new sweep's first round while its manifest (with the git commit
    # and the packages' versions) and resolved scenario are written
    with (
        interrupts.ctrl_c_handled(),  # from Python too: a notebook's Ctrl-C deferred likewise
        locked_folder(out, create=not resume),  # removed again if new and left empty
        sweep.workers(executor, jobs or default_jobs(), dask_address) as pool,
    ):
        work = functools.partial(sweep.compute, pool=pool, batch=batch, progress=progress)
        if plan.command == "run":
            return _run_into(out, plan, force, started, argv, work)
        if not resume:
            work = functools.partial(work, first=sweep.start(plan, pool, batch))
        return _sweep_into(out, plan, force, resume, started, argv, work, batch, say)


def _run_into(out: Path, plan, force, started, argv, work) -> Outcome:
    """A run into ``out``: its tasks' shards and results staged inside it and moved into
    place at the end, the manifest last, or nothing at all (an error, Ctrl-C). ``work``
    computes the tasks (:func:`ftsim.experiments.sweep.compute`)."""
    from ftsim.experiments import sweep
    from ftsim.experiments.folders import prepare_output
    from ftsim.experiments.output import StagedFolder
    from ftsim.experiments.pool import WorkerDied
    from ftsim.experiments.store import RunStore

    prepare_output(out, "run", force, plan.config_hash)
    results = StagedFolder(out)
    try:
        with interrupts.unwrapped(), results as staging:
            store = RunStore(staging, durable=False)  # removed whole if it fails
            store.shards.mkdir()
            computed, reused, copied = work(plan, store)
            summary = sweep.finish(plan, store)
            store.discard_shards()  # a run cannot be resumed: its folder holds the results
            _finish_folder(plan, store, started, argv, computed, reused, copied)
    except KeyboardInterrupt:
        raise StudyInterrupted(out, 0, 0, 0, 0, results.committed) from None
    except WorkerDied as exc:
        raise WorkerDied(exc.cause, f"nothing was written to {out}") from None
    return Outcome(plan, out, summary, computed, reused, copied)


def _sweep_into(out: Path, plan, force, resume, started, argv, work, batch, say):
    """A sweep into ``out``: created (or resumed) at once, each task's shard kept as it
    finishes (``work``: :func:`ftsim.experiments.sweep.compute`), then the merged results
    and the manifest's session."""
    from ftsim.experiments import sweep
    from ftsim.experiments.output import OutputError
    from ftsim.experiments.pool import WorkerDied
    from ftsim.experiments.store import RunStore

    if resume:
        store = RunStore.resume(out, plan.config_hash)
        if store.discarded:
            say(
                f"ftsim: {len(store.discarded)} shard file(s) in {store.shards} are not "
                "recorded in SHA256SUMS or fail their checksum (truncated or edited?); "
                "their tasks are computed again"
            )
    else:
        store = RunStore.create(out, sweep.manifest(plan, argv, started.isoformat()), force)
    held = _kept_reps(store)
    try:
        with interrupts.unwrapped():
            write_resolved(store.root / "scenario.yaml", plan.base)
            computed, reused, copied = work(plan, store)
            summary = sweep.finish(plan, store)
            _finish_folder(plan, store, started, argv, computed, reused, copied)
    except KeyboardInterrupt:  # while computing or merging: the shards are kept
        with interrupts.shielded():  # a second Ctrl-C here lost what the first kept
            stop = _interrupted(plan, store, batch)
            with contextlib.suppress(OutputError):
                kept = stop.kept_reps - held
                _unfinished_session(store, started, argv, kept, held, "interrupted")
        raise stop from None
    except (OutputError, WorkerDied) as exc:
        with contextlib.suppress(OutputError):
            store.sync()
            if isinstance(exc, WorkerDied):
                kept = _kept_reps(store)
                _unfinished_session(store, started, argv, kept - held, held, "a worker died")
        note = f"the finished tasks are kept: continue with {option('resume', store.root)}"
        if isinstance(exc, WorkerDied):
            raise WorkerDied(exc.cause, note) from None
        raise OutputError(exc.reason, exc.path, note) from None
    return Outcome(plan, store.root, summary, computed, reused, copied)


def result_warnings(outcome: Outcome) -> list[Warning]:
    """What the results need said with them, as notices: policies (at sweep points) whose
    statistics leave out unfinished replications, targets of ``target_pls`` missed beyond
    doubt (:func:`ftsim.experiments.sweep.pls_over_target`), intervals still wider than
    ``--target-halfwidth`` at ``--max-reps`` (:func:`~ftsim.experiments.sweep.
    short_of_target`). The command line prints them, the Python API issues them as
    warnings."""
    from ftsim.experiments.sweep import pls_over_target, short_of_target
    from ftsim.experiments.tables import unfinished_warnings
    from ftsim.notices import MaxRepsReached, TargetPlsMissed, UnfinishedReplications

    plan, records = outcome.plan, outcome.records
    unfinished = unfinished_warnings(records, plan.columns)
    return (
        [UnfinishedReplications(line.removeprefix("warning: ")) for line in unfinished]
        + [TargetPlsMissed(line) for line in pls_over_target(plan, records)]
        + [MaxRepsReached(line) for line in short_of_target(plan, records)]
    )


def _finish_folder(
    plan, store: RunStore, started, argv, computed: int, reused: int, copied: int
) -> None:
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
        "copied_reps": copied,
        "reused_reps": reused,
    }
    if plan.command == "run":
        write_resolved(store.root / "scenario.yaml", plan.base)
        fields = manifest(plan, argv, started.isoformat()) | {"sessions": [session]}
    else:
        fields = store.manifest() | {"sessions": [*store.manifest()["sessions"], session]}
    fields.update(finished_utc=finished, files=result_checksums(store.root))
    write_json(store.root / "manifest.json", fields)


def _unfinished_session(store: RunStore, started, argv, computed: int, reused: int, why: str):
    """A sweep's session that ended before its results (``why``: "interrupted", "a worker
    died"), in the manifest: the replications it computed and found stored. A resumed
    session finds them stored."""
    session = {
        "argv": argv,
        "started_utc": started.isoformat(),
        "ended_utc": datetime.now(UTC).isoformat(),
        "ended": why,
        "computed_reps": computed,
        "reused_reps": reused,
    }
    store.update_manifest(sessions=[*store.manifest()["sessions"], session])


def _kept(store: RunStore) -> list:
    """The finished tasks whose rows shard is on disk."""
    return [key for key in store.done() if (store.shards / f"{key.name}.csv").exists()]


def _kept_reps(store: RunStore) -> int:
    """The replications of the finished tasks whose rows shard is on disk."""
    return sum(len(key.reps) for key in _kept(store))


def _interrupted(plan: Plan, store: RunStore, batch: int) -> StudyInterrupted:
    """What an interrupted sweep kept, its shards synced to disk first (what it says is
    saved is)."""
    from ftsim.experiments.sweep import n_tasks

    store.sync()

    done = _kept(store)
    reps = sum(len(key.reps) for key in done)
    if plan.target_halfwidth is not None:  # replications added up to max_reps per pair
        most = plan.max_reps * len(plan.points) * len(plan.policies)
        return StudyInterrupted(store.root, len(done), None, reps, most)
    total = sum(p.scenario.run.replications for p in plan.points) * len(plan.policies)
    return StudyInterrupted(store.root, len(done), n_tasks(plan, batch), reps, total)


def write_resolved(path: Path, scenario: Scenario) -> None:
    """The resolved scenario as YAML at ``path`` (every default filled in, in units; values
    without effect left out: :func:`ftsim.scenario.notices.resolved_data`): a run folder's
    ``scenario.yaml``, an advice's ``picks.yaml``."""
    import yaml

    from ftsim.experiments.output import atomic_write_text
    from ftsim.scenario.notices import resolved_data

    atomic_write_text(path, yaml.safe_dump(resolved_data(scenario), sort_keys=False))
