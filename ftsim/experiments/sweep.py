"""Sweeps: many scenario points × policies × replications, executed in batches, resumable.

A point is the scenario file with the point's values set at dotted paths (as ``--set``
does); the points are the cartesian product of the ``grid`` lists times the co-varying
``zip`` lists of the ``sweep:`` section, and ``--grid`` adds or replaces grid entries.
Every point is validated before anything is simulated.

Work is split into tasks of (point, policy, a range of replications); at a point whose
replications train the embedded model, the tasks of all policies over the same replications
run as one, so that each replication trains one failure-free model for all of them (as
``run`` does). Replication *i* is fully determined by the seed and *i* (common random
numbers), so the rows do not depend on how replications are batched into tasks, nor on the
executor: serial, a local process pool or a Dask cluster. Each finished task is stored at
once as a shard per policy (:mod:`ftsim.experiments.store`); the merged results are sorted
by point, policy and replication.

With a target half-width, rounds of replications are added (indices n, n+1, …) to every
(point, policy) whose 95% interval of ``overhead_frac`` is still wider, up to a cap.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
from collections.abc import Callable, Iterator
from concurrent.futures import as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ftsim.experiments.pool import default_jobs, process_pool
from ftsim.experiments.runner import simulate_reps
from ftsim.experiments.store import RunStore, StoreError, TaskKey
from ftsim.scenario.loader import (
    ScenarioError,
    config_hash,
    parse_yaml,
    read_with_overrides,
    set_path,
    validate_scenario,
)
from ftsim.scenario.schema import Scenario, Sweep

TIMELINE_REP = 0
"""The replication whose timeline is kept, for every point and policy."""


@dataclass(frozen=True)
class Point:
    """One scenario of the sweep: the base scenario with ``values`` at dotted paths."""

    index: int
    values: dict[str, object]
    scenario: Scenario

    @property
    def cells(self) -> dict[str, object]:
        """The point's columns in result rows: ``point`` and one per swept key."""
        return {"point": self.index, **{k: _cell(v) for k, v in self.values.items()}}


@dataclass(frozen=True)
class Plan:
    """A validated sweep: its points, the policies to run and the stopping rule."""

    path: Path
    base: Scenario
    points: list[Point]
    policies: list[int]
    reference: str
    target_halfwidth: float | None = None
    max_reps: int = 1000
    columns: list[str] = field(default_factory=list)
    """Swept keys, in grid then zip order: the point columns of the results."""

    @property
    def config_hash(self) -> str:
        """Hash of everything that determines the rows (not the batching or executor)."""
        canonical = {
            "points": [
                {
                    "values": {k: _cell(v) for k, v in p.values.items()},
                    "scenario": config_hash(p.scenario),
                }
                for p in self.points
            ],
            "policies": self.policies,
            "target_halfwidth": self.target_halfwidth,
            "max_reps": self.max_reps if self.target_halfwidth is not None else None,
        }
        text = json.dumps(canonical, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


# -- planning ------------------------------------------------------------------------------


def parse_grid_option(text: str, path: Path) -> tuple[str, list]:
    """``key=v1,v2,...`` (each value read as YAML) or ``key=[v1, v2]`` (a YAML list)."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not key or not values.strip():
        raise ScenarioError(path, [("--grid", f"needs dotted.key=v1,v2,... (got {text!r})")])
    if values.strip().startswith("["):
        parsed = _yaml_value(values)
        if isinstance(parsed, list) and parsed:
            return key, parsed
        raise ScenarioError(path, [(f"--grid {key}", f"not a YAML list (got {values!r})")])
    return key, [_yaml_value(v.strip()) for v in values.split(",")]


def expand(sweep: Sweep | None) -> list[dict[str, object]]:
    """The points' values: the grid's cartesian product (first key slowest) × the zip rows."""
    if sweep is None:
        return [{}]
    grid = [[(k, v) for v in values] for k, values in sweep.grid.items()]
    zipped = [
        dict(zip(sweep.zip, row, strict=True)) for row in zip(*sweep.zip.values(), strict=True)
    ]
    return [dict(combo) | row for combo in itertools.product(*grid) for row in zipped or [{}]]


MAX_POINTS = 10_000
"""Most points a sweep may have (each is validated as a whole scenario before any runs)."""


def n_points(sweep: Sweep | None) -> int:
    """How many points :func:`expand` gives, without expanding them."""
    if sweep is None:
        return 1
    rows = len(next(iter(sweep.zip.values()))) if sweep.zip else 1
    return math.prod(len(values) for values in sweep.grid.values()) * rows


def plan_sweep(
    path: Path,
    overrides: list[str],
    grid: list[str],
    select_policies: Callable[[Scenario], list[int]],
    reference: str | None = None,
    target_halfwidth: float | None = None,
    max_reps: int = 1000,
) -> Plan:
    """Read the scenario, apply ``--set`` overrides and ``--grid`` entries, validate every point.

    ``select_policies`` maps the base scenario to the indices of the policies to run.
    Raises ScenarioError listing every problem of every point (each problem once, with the
    first point it occurs at).
    """
    path = Path(path)
    data, problems = read_with_overrides(path, overrides)
    if data.get("sweep") is None:
        data["sweep"] = {}
    section = data["sweep"]
    if isinstance(section, dict):  # otherwise validation reports it
        if grid and section.get("grid") is None:
            section["grid"] = {}
        for text in grid:
            key, values = parse_grid_option(text, path)
            section["grid"][key] = values
        if reference is not None:
            section["reference"] = reference
    if problems:
        raise ScenarioError(path, problems)
    base = validate_scenario(data, path)
    policies = select_policies(base)
    labels = [base.policy_labels[i] for i in policies]
    chosen = (base.sweep.reference if base.sweep else None) or labels[0]
    if chosen not in labels:
        raise ScenarioError(path, [("sweep.reference", f"{chosen!r} is not among {labels}")])
    count = n_points(base.sweep)
    if count > MAX_POINTS:
        message = f"{count:,} points, more than {MAX_POINTS:,}: sweep fewer values at once"
        raise ScenarioError(path, [("sweep", message)])
    plain = {k: v for k, v in data.items() if k != "sweep"}
    points = _points(plain, expand(base.sweep), path)
    columns = list(points[0].values)
    return Plan(path, base, points, policies, chosen, target_halfwidth, max_reps, columns)


def _points(plain: dict, all_values: list[dict], path: Path) -> list[Point]:
    points, problems = [], {}
    for index, values in enumerate(all_values):
        data = copy.deepcopy(plain)
        where = ", ".join(f"{k}={_cell(v)}" for k, v in values.items())
        try:
            for key, value in values.items():
                try:
                    set_path(data, key.split("."), copy.deepcopy(value))
                except ValueError as exc:
                    raise ScenarioError(path, [(f"sweep {key}", str(exc))]) from None
            points.append(Point(index, values, validate_scenario(data, path, warn=False)))
        except ScenarioError as exc:
            for path_, message in exc.problems:
                problem = (_sweep_key_at(path_, message, values), message)
                problems.setdefault(problem, f"sweep point {index}: {where}")
    if problems:
        raise ScenarioError(path, [(p, f"{m} [{w}]") for (p, m), w in problems.items()])
    return points


def _sweep_key_at(path: str, message: str, values: dict) -> str:
    """``sweep KEY`` when the problem at ``path`` is the sweep key KEY itself not fitting the
    scenario (an unknown key on its way, ``cluster.storage.bogus`` of
    ``cluster.storage.bogus.deep``), else ``path``."""
    parts = path.split(".")
    for key in values:
        steps = key.split(".")
        fits = len(parts) <= len(steps) and all(
            s in ("*", p) for s, p in zip(steps, parts, strict=False)
        )
        if fits and (len(parts) < len(steps) or message.startswith("unknown key")):
            return f"sweep {key}"
    return path


# -- execution -----------------------------------------------------------------------------


def run_task(
    scenario: Scenario, cells: dict, keys: list[TaskKey]
) -> list[tuple[list[dict], list[dict]]]:
    """Simulate tasks of one point over the same replications together (their policies
    share each trained replication's failure-free model); per key, its rows and, if it
    holds replication 0, that timeline."""
    policies = [key.policy for key in keys]
    rows, timelines = simulate_reps(scenario, policies, keys[0].reps, TIMELINE_REP)
    point = {"point": cells["point"]}
    return [
        ([cells | r for r in mine], [point | r for r in timeline])
        for mine, timeline in zip(rows, timelines, strict=True)
    ]


def run_sweep(
    plan: Plan,
    store: RunStore,
    executor: str = "process",
    jobs: int | None = None,
    dask_address: str | None = None,
    batch: int = 10,
    progress: Callable[[int], None] | None = None,
) -> tuple[int, int]:
    """Run the replications not yet in ``store``; returns (computed, reused) replications."""
    targets = {
        (p.index, q): p.scenario.run.replications for p in plan.points for q in plan.policies
    }
    planned = dict.fromkeys(targets, 0)
    computed = reused = 0
    with _executor(executor, jobs or default_jobs(), dask_address) as pool:
        while targets:
            covered = store.covered()
            tasks = []
            for pair, stop in targets.items():
                have = covered.get(pair, set())
                wanted = range(planned[pair], stop)
                found = sum(1 for r in wanted if r in have)
                reused += found
                if progress is not None and found:
                    progress(found)
                tasks += _tasks(pair, [r for r in wanted if r not in have], batch)
                planned[pair] = stop
            for key, (rows, timeline) in _results(plan, tasks, pool):
                store.write_shard(key, rows, timeline)
                computed += len(key.reps)
                if progress is not None:
                    progress(len(key.reps))
            targets = _more_replications(plan, store, planned, batch)
    return computed, reused


def n_tasks(plan: Plan, batch: int) -> int:
    """Tasks of the planned replications (before any added for a target half-width)."""
    return sum(-(-p.scenario.run.replications // batch) for p in plan.points) * len(plan.policies)


def n_units(plan: Plan, batch: int) -> int:
    """Units of work a worker takes among the planned tasks: the tasks of a trained point's
    policies over the same replications run together (:func:`_groups`) and count once."""
    tasks = [
        key
        for p in plan.points
        for q in plan.policies
        for key in _tasks((p.index, q), list(range(p.scenario.run.replications)), batch)
    ]
    return len(_groups(plan, tasks))


def local_workers(plan: Plan, jobs: int | None, batch: int) -> tuple[int, str | None]:
    """Local workers for ``jobs`` (default: the CPUs): at most the CPUs and the first round's
    tasks (:func:`n_units`), as more would only compete for the same cores. Returns the
    number and, when a requested ``jobs`` was lowered, a note saying so."""
    limits = {"the CPUs available": default_jobs(), "the tasks to run": n_units(plan, batch)}
    wanted = jobs or limits["the CPUs available"]
    reason = min(limits, key=limits.get)
    if wanted <= limits[reason]:
        return wanted, None
    note = f"--jobs {jobs}: using {limits[reason]} ({reason})" if jobs else None
    return limits[reason], note


def _tasks(pair: tuple[int, int], reps: list[int], batch: int) -> list[TaskKey]:
    """Tasks for the sorted ``reps``: contiguous runs, cut at multiples of ``batch``."""
    tasks: list[TaskKey] = []
    for rep in reps:
        last = tasks[-1] if tasks else None
        if last and rep == last.stop and rep // batch == last.start // batch:
            tasks[-1] = TaskKey(*pair, last.start, rep + 1)
        else:
            tasks.append(TaskKey(*pair, rep, rep + 1))
    return tasks


def _groups(plan: Plan, tasks: list[TaskKey]) -> list[list[TaskKey]]:
    """Tasks run together: where the replications train the model, those of one point over
    the same replications (one failure-free trainer per replication serves every policy);
    timing-only tasks run alone (smaller tasks spread better over workers)."""
    groups: list[list[TaskKey]] = []
    shared: dict[tuple[int, int, int], list[TaskKey]] = {}
    for key in tasks:
        if not plan.points[key.point].scenario.trains_model(key.start):
            groups.append([key])
            continue
        group = shared.get((key.point, key.start, key.stop))
        if group is None:
            group = shared[key.point, key.start, key.stop] = []
            groups.append(group)
        group.append(key)
    return groups


def _results(plan: Plan, tasks: list[TaskKey], pool) -> Iterator[tuple[TaskKey, tuple]]:
    """(key, result) of every task, as tasks finish."""
    groups = _groups(plan, tasks)
    args = [(plan.points[g[0].point].scenario, plan.points[g[0].point].cells, g) for g in groups]
    if pool is None or len(groups) < 2:
        for group, arg in zip(groups, args, strict=True):
            yield from zip(group, run_task(*arg), strict=True)
        return
    futures = {pool.submit(run_task, *arg): g for g, arg in zip(groups, args, strict=True)}
    try:
        for future in as_completed(futures):
            yield from zip(futures[future], future.result(), strict=True)
    finally:
        for future in futures:
            future.cancel()


@contextmanager
def _executor(kind: str, jobs: int, dask_address: str | None):
    """None for serial execution, else a concurrent.futures-style executor."""
    if kind == "dask":
        with _dask_executor(jobs, dask_address) as pool:
            yield pool
    elif jobs <= 1:
        yield None
    else:
        with process_pool(jobs) as pool:
            yield pool


DASK_CONNECT_TIMEOUT_S = 4
"""How long to try reaching a Dask scheduler before giving up."""


def check_dask_scheduler(address: str) -> None:
    """StoreError unless the Dask scheduler at ``address`` answers (checked before a sweep
    creates its folder, so a wrong address leaves nothing behind)."""
    _dask_client(address).close()


def _distributed():
    """The dask.distributed module; StoreError if it is not installed."""
    try:
        import distributed
    except ImportError:
        raise StoreError(
            "--executor dask needs dask.distributed: pip install 'ftsim[dask]'"
        ) from None
    return distributed


def _dask_client(target):
    """A Dask client of ``target`` (an address or a local cluster); StoreError if it cannot
    connect within ``DASK_CONNECT_TIMEOUT_S``."""
    try:
        return _distributed().Client(target, timeout=DASK_CONNECT_TIMEOUT_S)
    except (OSError, ValueError, TypeError) as exc:
        raise StoreError(f"--dask-address {target}: cannot connect ({exc})") from None


@contextmanager
def _dask_executor(jobs: int, address: str | None):
    """An executor on the Dask scheduler at ``address``, or on a new local cluster."""
    cluster = None
    if address is None:
        cluster = _distributed().LocalCluster(
            n_workers=jobs, threads_per_worker=1, dashboard_address=None, silence_logs=40
        )
    client = _dask_client(address or cluster)
    try:
        yield client.get_executor(pure=False)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _more_replications(
    plan: Plan, store: RunStore, planned: dict[tuple[int, int], int], batch: int
) -> dict[tuple[int, int], int]:
    """New replication targets for the pairs whose interval is wider than the target, from
    their finished replications (an unfinished one has no overhead, as in the summary)."""
    if plan.target_halfwidth is None:
        return {}
    from ftsim.experiments.stats import t_interval, t_quantile

    values: dict[tuple[int, int], dict[int, float]] = {}
    for key, rows in store.task_rows():
        pair = (key.point, key.policy)
        for row in rows:
            overhead = float(row["overhead_frac"])
            if pair in planned and int(row["rep"]) < planned[pair] and math.isfinite(overhead):
                values.setdefault(pair, {})[int(row["rep"])] = overhead
    targets = {}
    for pair, n in planned.items():
        s = t_interval(list(values.get(pair, {}).values()))
        half = (s["high"] - s["low"]) / 2
        if n >= plan.max_reps or half <= plan.target_halfwidth:
            continue
        needed = n + batch
        if s["std"] > 0:
            # n with t·s/√n at most the target; a tiny target needs more than max_reps (and
            # its square may overflow a float): the cap is reached, and said in the summary
            root_n = t_quantile(0.95, n - 1) * s["std"] / plan.target_halfwidth
            enough = math.ceil(root_n**2) if root_n < math.sqrt(plan.max_reps) else plan.max_reps
            needed = -(-max(needed, enough) // batch) * batch
        targets[pair] = min(needed, plan.max_reps)
    return targets


# -- results -------------------------------------------------------------------------------


def manifest(plan: Plan, argv: list[str], started: str) -> dict:
    """The manifest written when a sweep starts."""
    from ftsim.experiments.output import git_commit, versions

    return {
        "command": "sweep",
        "scenario": plan.base.name,
        "scenario_file": str(plan.path),
        "config_hash": plan.config_hash,
        "seed": plan.base.run.seed,
        "columns": plan.columns,
        "points": [
            {"point": p.index, "values": p.values, "replications": p.scenario.run.replications}
            for p in plan.points
        ],
        "policies": [plan.base.policy_labels[i] for i in plan.policies],
        "reference": plan.reference,
        "target_halfwidth": plan.target_halfwidth,
        "max_reps": plan.max_reps,
        "argv": argv,
        "git_commit": git_commit(),
        "versions": versions(),
        "started_utc": started,
        "sessions": [],
    }


def finish(plan: Plan, store: RunStore):
    """Merge the shards into runs.csv/.parquet and timeline.csv; write and return the summary."""
    import io

    import pandas as pd

    from ftsim.experiments.output import csv_text, write_csv, write_csv_and_parquet
    from ftsim.experiments.stats import summarize

    rows = store.rows()
    write_csv_and_parquet(store.root / "runs", rows)
    write_csv(store.root / "timeline.csv", store.timeline())
    runs = pd.read_csv(io.StringIO(csv_text(rows)))
    summary = summarize(runs, plan.columns, plan.reference)
    write_csv(store.root / "summary.csv", summary.to_dict("records"))
    return summary


def short_of_target(plan: Plan, summary) -> list[str]:
    """One line per (point, policy) whose overhead interval is still wider than
    ``--target-halfwidth`` when its replications reached ``--max-reps`` (the cap)."""
    if plan.target_halfwidth is None:
        return []
    lines = []
    for row in summary.to_dict("records"):
        half = row.get("overhead_frac_ci95_half", math.nan)
        if row["n"] + row["n_unfinished"] >= plan.max_reps and not half <= plan.target_halfwidth:
            lines.append(
                f"{row['policy']} at point {row['point']}: --max-reps {plan.max_reps} reached "
                f"with a 95% CI half-width of {half:.3g}, above --target-halfwidth "
                f"{plan.target_halfwidth:g}"
            )
    return lines


def _yaml_value(text: str):
    try:
        return parse_yaml(text)
    except yaml.YAMLError:
        return text


def _cell(value):
    """A swept value as a table cell: scalars as they are, structures as JSON."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return json.dumps(value, sort_keys=True, default=str)
