"""Sweeps: many scenario points × policies × replications, executed in batches, resumable.

A point is the scenario file with the point's values set at dotted paths (as ``--set``
does); the points are the cartesian product of the ``grid`` lists times the co-varying
``zip`` lists of the ``sweep:`` section, and ``--grid`` (or the Python API's grid) adds or
replaces grid entries. Every point is validated before anything is simulated. A run is the
plan of one point (:class:`Plan` with ``command`` "run"), executed the same way.

Work is split into tasks of (point, policy, a range of replications); a replication that
trains the embedded model is a task of its own, and the tasks of all policies of that
replication run as one, so that it trains one failure-free model for all of them (and for
those of the other points that train the same model: :attr:`Plan.same_model`). Replication *i* is
fully determined by the seed and *i* (common random numbers), so the rows do not depend on
how replications are batched into tasks, nor on the executor: serial, a local process pool
or a Dask cluster. Nor does a policy read another policy's settings: where a sweep changes
only other policies' fields (``policies.1.interval`` swept, policy 0 is the same at every
point), a policy the same at several points is simulated at the first and its rows written
for each (:attr:`Plan.repeats`). Each finished task is stored at once as a shard per policy
(:mod:`ftsim.experiments.store`); the merged results are sorted by point, policy and
replication.

With a target half-width, rounds of replications are added (indices n, n+1, …) to every
(point, policy) whose 95% interval of ``overhead_frac`` is still wider, up to a cap.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import hashlib
import itertools
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import yaml
from pydantic import BaseModel

from ftsim.experiments.pool import capacity, default_jobs, finished, process_pool, submit_all
from ftsim.experiments.runner import simulate_policies, training_cost
from ftsim.experiments.stats import SI_SUFFIX
from ftsim.experiments.store import RunStore, StoreError, TaskKey, shard_texts
from ftsim.notices import Notice
from ftsim.options import named, option
from ftsim.scenario.loader import (
    Overrides,
    ScenarioError,
    config_hash,
    only_run,
    override_scenario,
    parse_yaml,
    read_yaml,
    validate_scenario,
)
from ftsim.scenario.overrides import Target, assign, only_selected, parse_assignment
from ftsim.scenario.schema import Scenario, Sweep, job_mtbf_s

TIMELINE_REP = 0
"""The replication whose timeline is kept, for every point and policy."""


@dataclass(frozen=True)
class Point:
    """One scenario of the sweep: the base scenario with ``values`` at dotted paths."""

    index: int
    values: dict[str, object]
    scenario: Scenario


@dataclass(frozen=True)
class Plan:
    """A validated study: its points, the policies to run and the stopping rule.

    A ``run`` is the plan of one point without swept keys (``command`` "run"): its rows
    carry no ``point`` column, so that its files are those ``run`` always wrote.
    """

    path: Path
    base: Scenario
    points: list[Point]
    policies: list[int]
    reference: str
    target_halfwidth: float | None = None
    max_reps: int = 1000
    columns: list[str] = field(default_factory=list)
    """Swept keys, in grid then zip order: the point columns of the results."""
    positions: list[int] | None = None
    """Places in the file of the policies ``--policy`` selected (None: all): the keys of
    the points use them (``policies.4.k``), the base scenario holds only those policies."""
    notes: list[Notice] = field(default_factory=list)
    """Decisions taken for the user, to say before running (a ``--grid`` key that replaced
    one of the file's; CPR falling back to full recovery at a point)."""
    si_columns: list[str] = field(default_factory=list)
    """Swept keys whose values are numbers once validated: they get a ``<key>_si`` column."""
    command: str = "sweep"

    @property
    def config_hash(self) -> str:
        """Hash of everything that determines the rows (not the batching or executor); for
        a run, the hash of its scenario (the same when run again from the folder's
        ``scenario.yaml``, which holds only the policies that ran)."""
        if self.command == "run":
            return config_hash(self.base)
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

    @functools.cached_property
    def alike(self) -> list[int]:
        """Per point, the first point whose scenario is the same outside the policies (the
        job, the cluster, the failures, the run, the trainer), compared on the validated
        values: a value spelled otherwise (``60 min`` for ``1 h``) is the same. Such points
        see the same failures: a policy the same at both gives the same rows
        (:attr:`repeats`)."""
        first: dict[str, int] = {}
        return [
            first.setdefault(_outside_policies(point.scenario), point.index)
            for point in self.points
        ]

    @functools.cached_property
    def same_model(self) -> list[int]:
        """Per point, the first point whose replications train the same failure-free model
        (:func:`ftsim.cosim.replay.model_setting`: the same trainer section, seed and number
        of embedding PS, whatever the failures, cluster or policies): a trained replication
        of such points trains it once for the policies of all of them."""
        if not any(point.scenario.trains_model(0) for point in self.points):
            return [point.index for point in self.points]
        from ftsim.cosim.replay import model_setting

        first: dict[str, int] = {}
        return [
            first.setdefault(model_setting(point.scenario), point.index) for point in self.points
        ]

    @functools.cached_property
    def repeats(self) -> dict[tuple[int, int], int]:
        """For each (point, policy index) that repeats an earlier point's: that point. A
        policy repeats when the points are alike (:attr:`alike`) and it validates to the
        same values with the same label: a replication of it then gives the same row (only
        the point columns differ), as no policy reads another's settings. So a wildcard key
        that only some policies have (``policies.*.fraction``) leaves the others
        repeating."""
        first: dict[tuple, int] = {}
        found: dict[tuple[int, int], int] = {}
        for point in self.points if len(self.points) > 1 else ():
            scenario = point.scenario
            for q in self.policies:
                policy = json.dumps(scenario.policies[q].model_dump(mode="json"), sort_keys=True)
                setting = (self.alike[point.index], q, scenario.policy_labels[q], policy)
                earlier = first.setdefault(setting, point.index)
                if earlier != point.index:
                    found[point.index, q] = earlier
        return found

    def row_cells(self, point: Point, policy: int) -> dict[str, object]:
        """The columns a row of ``policy`` at ``point`` starts with: ``point``, then each
        swept key's text and, for a numeric key, its value in SI base units as
        ``<key>_si`` (a wildcard ``policies.*`` key: this policy's value; empty when the
        policy has no such field). Nothing for a run."""
        if self.command == "run":
            return {}
        cells: dict[str, object] = {"point": point.index}
        for key, value in point.values.items():
            cells[key] = _cell(value)
            if key in self.si_columns:
                cells[key + SI_SUFFIX] = si_value(point.scenario, key, policy, self.positions)
        return cells

    def timeline_cells(self, point: Point) -> dict[str, object]:
        """The columns a timeline row of ``point`` starts with (none for a run)."""
        return {} if self.command == "run" else {"point": point.index}


def _outside_policies(scenario: Scenario) -> str:
    """The validated values of ``scenario`` outside its policies (and its sweep section), as
    JSON text to compare."""
    outside = scenario.model_dump(mode="json", exclude={"policies", "sweep"})
    return json.dumps(outside, sort_keys=True)


def si_value(
    scenario: Scenario, key: str, policy: int, positions: Sequence[int] | None = None
) -> float | None:
    """The validated value at the dotted ``key`` of ``scenario`` if it is a number (durations
    in seconds, sizes in bytes, bandwidths in bytes/s, counts and fractions as they are),
    else None. A ``*`` under ``policies`` stands for ``policy``; any other ``*`` for the
    first entry (a wildcard sets every entry to the same value). A policy's index in
    ``key`` is its place in the file: ``positions`` gives the places of the scenario's
    policies when ``--policy`` selected some (None: all)."""
    node: object = scenario
    parts = key.split(".")
    for i, part in enumerate(parts):
        if isinstance(node, list):
            if part == "*":
                index = policy if parts[:i] == ["policies"] else 0
            elif part.isdigit():
                index = int(part)
                if parts[:i] == ["policies"] and positions is not None:
                    if index not in positions:
                        return None
                    index = positions.index(index)
            else:
                return None
            if index >= len(node):
                return None
            node = node[index]
        elif isinstance(node, BaseModel):
            name = _field_name(type(node), part)
            if name is None:
                return None
            node = getattr(node, name)
        elif isinstance(node, dict):
            node = node.get(part)
        else:
            return None
    if isinstance(node, bool) or not isinstance(node, int | float):
        return None
    return float(node)


def _field_name(model: type[BaseModel], key: str) -> str | None:
    """The field of ``model`` that the YAML key ``key`` sets (its name or an alias)."""
    if key in model.model_fields:
        return key
    for name, info in model.model_fields.items():
        aliases = {info.alias, info.validation_alias}
        choices = getattr(info.validation_alias, "choices", None) or []
        if key in aliases or key in choices:
            return name
    return None


# -- planning ------------------------------------------------------------------------------


def parse_grid_option(text: str, path: Path) -> tuple[str, list]:
    """``key=v1,v2,...`` (each value read as YAML) or ``key=[v1, v2]`` (a YAML list)."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not key or not values.strip():
        raise ScenarioError(path, [("--grid", f"needs dotted.key=v1,v2,... (got {text!r})")])
    if values.strip().startswith("["):
        parsed = _yaml_value(values)
        if not (isinstance(parsed, list) and parsed):
            raise ScenarioError(path, [(f"--grid {key}", f"not a YAML list (got {values!r})")])
        return key, parsed  # a value repeated: the schema's sweep section says so
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
    scenario: Path | str | Scenario,
    overrides: Overrides,
    grid: Sequence[str] | Mapping[str, object],
    policies: Sequence[str] | None = None,
    reference: str | None = None,
    target_halfwidth: float | None = None,
    max_reps: int = 1000,
    command: str = "sweep",
) -> Plan:
    """Read the scenario, select ``policies`` (by label; None: all), apply ``--set``
    overrides and the grid, validate every point.

    ``scenario`` is a file or a loaded scenario (its resolved fields are read back as a
    file would be). ``grid`` holds ``--grid`` texts (``key=v1,v2``) or maps keys to lists
    of values, plus optionally ``"zip"`` mapping keys to co-varying lists (as in a
    scenario's ``sweep:`` section). A grid key that sets what a key of the file's
    ``sweep:`` section sets (the same field of a policy, or another member of its
    exclusive group: ``interval`` for ``target_pls``) replaces it, with a note in
    :attr:`Plan.notes`; two keys of the same origin that do so are an error. ``command``
    "run" plans a run: one point, the scenario's ``sweep:`` section not expanded. Raises
    ScenarioError listing every problem of every point (each problem once, with the first
    point it occurs at).
    """
    path, data = _scenario_data(scenario)
    data, selected = override_scenario(data, path, overrides, policies)
    notes: list[Notice] = []
    if command != "run":
        if data.get("sweep") is None:
            data["sweep"] = {}
        section = data["sweep"]
        if isinstance(section, dict):  # otherwise validation reports it
            given, zipped = _grid_entries(grid, path)
            plain = {k: v for k, v in data.items() if k != "sweep"}
            notes = _replaced_keys(plain, section, given | zipped, selected)
            for name, entries in (("grid", given), ("zip", zipped)):
                if entries and section.get(name) is None:
                    section[name] = {}
                if isinstance(section.get(name), dict):  # otherwise validation reports it
                    section[name].update(entries)
            if reference is not None:
                section["reference"] = reference
            notes += _overrides_swept(plain, overrides, section, selected)
    # a loaded scenario was warned about when it was loaded; its dump spells out every default
    warn = not isinstance(scenario, Scenario)
    selection = only_run if command == "run" else only_selected
    base = validate_scenario(selection(data, selected), path, warn=warn, positions=selected)
    labels = base.policy_labels
    indices = list(range(len(labels)))
    chosen = (base.sweep.reference if base.sweep else None) or labels[0]
    if command == "run":
        notes = policy_notices(base)
        return Plan(path, base, [Point(0, {}, base)], indices, chosen, positions=selected,
                    notes=notes, command="run")  # fmt: skip
    if chosen not in labels:
        raise ScenarioError(path, [("sweep.reference", f"{chosen!r} is not among {labels}")])
    count = n_points(base.sweep)
    if count > MAX_POINTS:
        message = f"{count:,} points, more than {MAX_POINTS:,}: sweep fewer values at once"
        raise ScenarioError(path, [("sweep", message)])
    plain = {k: v for k, v in data.items() if k != "sweep"}
    points = _points(plain, expand(base.sweep), path, selected)
    notes += _point_notices(points)
    columns = list(points[0].values)
    numeric = [
        key
        for key in columns
        if any(si_value(p.scenario, key, q, selected) is not None for p in points for q in indices)
    ]
    return Plan(
        path, base, points, indices, chosen, target_halfwidth, max_reps, columns, selected,
        notes, numeric,
    )  # fmt: skip


def _scenario_data(scenario: Path | str | Scenario) -> tuple[Path, dict]:
    """The path errors are reported against and the scenario as a mapping read from YAML.

    A loaded scenario is dumped as its run folder's ``scenario.yaml`` is (file paths in it
    are already absolute), without ``trainer.sharding.n_shards``, which validation derives
    from ``cluster.emb_ps`` (an override or a sweep may change it)."""
    if not isinstance(scenario, Scenario):
        path = Path(scenario)
        return path, read_yaml(path)
    data = scenario.model_dump(mode="json")
    if isinstance(data.get("trainer"), dict):
        (data["trainer"].get("sharding") or {}).pop("n_shards", None)
    return Path(f"<scenario {scenario.name}>"), data


def _grid_entries(grid: Sequence[str] | Mapping[str, object], path: Path) -> tuple[dict, dict]:
    """The grid's (grid, zip) entries: from ``--grid`` texts, or from a mapping whose
    ``"zip"`` entry maps keys to co-varying lists."""
    if not isinstance(grid, Mapping):
        entries: dict[str, list] = {}
        for text in grid:
            key, values = parse_grid_option(text, path)
            if key in entries:
                raise ScenarioError(
                    path, [(f"--grid {key}", "given twice: give all its values in one --grid")]
                )
            entries[key] = values
        return entries, {}
    zipped = grid.get("zip") or {}
    if not isinstance(zipped, Mapping):
        raise ScenarioError(path, [("grid zip", "must map keys to lists of values")])
    entries = {k: v for k, v in grid.items() if k != "zip"}
    return copy.deepcopy(entries), copy.deepcopy(dict(zipped))


def _replaced_keys(plain: dict, section: dict, given: dict, selected) -> list[Notice]:
    """Drop from the file's ``sweep`` ``section`` (grid and zip) every key that sets what a
    command-line ``given`` key sets (tried with their first values); the notes saying so."""
    notes = []
    for kind in ("grid", "zip"):
        keys = section.get(kind)
        if not isinstance(keys, dict):
            continue
        for key, values in list(keys.items()):
            if key in given or not isinstance(values, list) or not values:
                continue  # the same key is simply replaced; bad values: validation says
            mine = _dry_targets(plain, key, values[0], selected)
            for other, choices in given.items():
                theirs = _dry_targets(plain, other, choices[0], selected)
                clash = next((t for t in theirs for m in mine if t.clashes(m)), None)
                if clash is not None:
                    del keys[key]
                    notes.append(
                        Notice(
                            f"{named('grid')} {other} replaces the scenario's sweep.{kind} "
                            f"key {key} (both set {_choice(clash)})"
                        )
                    )
                    break
    return notes


def _overrides_swept(plain: dict, overrides: Overrides, section: dict, selected) -> list[Notice]:
    """A note for each override (``--set``) whose field a key of the sweep ``section`` (its
    grid and zip, ``--grid`` included) sets too: the swept values are the ones that run (an
    override that clears a field, ``null``, is left alone: whatever sets it, it is clear)."""
    if isinstance(overrides, Mapping):
        items = list(overrides.items())
    else:
        items = []
        for text in overrides:
            with contextlib.suppress(ValueError):  # reported when the overrides applied
                items.append(parse_assignment(text))
    swept = {}
    for kind in ("grid", "zip"):
        entries = section.get(kind)
        if isinstance(entries, dict):
            swept |= {k: v for k, v in entries.items() if isinstance(v, list) and v}
    notes = []
    for key, value in items:
        if value is None:  # a field cleared (target_pls: null) is not replaced by another
            continue
        mine = _dry_targets(plain, key, value, selected)
        for other, choices in swept.items():
            theirs = _dry_targets(plain, other, choices[0], selected)
            clash = next((t for t in theirs for m in mine if t.clashes(m)), None)
            if clash is not None:
                notes.append(
                    Notice(
                        f"sweep key {other} replaces {named('overrides')} {key} at every point "
                        f"(both set {_choice(clash)})"
                    )
                )
                break
    return notes


def _dry_targets(plain: dict, key: str, value, selected) -> list[Target]:
    """What setting ``key`` to ``value`` would set (nothing if it is an error: the points
    report it)."""
    try:
        return assign(copy.deepcopy(plain), key, copy.deepcopy(value), selected)
    except ValueError:
        return []


def _choice(target: Target) -> str:
    """``policies.1.interval`` or ``policies.1.(interval | target_pls | …)``."""
    field = target.field if len(target.group) == 1 else f"({' | '.join(target.group)})"
    return f"{target.where}.{field}" if target.where else field


def _points(plain: dict, all_values: list[dict], path: Path, selected=None) -> list[Point]:
    points, problems = [], {}
    for index, values in enumerate(all_values):
        data = copy.deepcopy(plain)
        where = _described(values)
        try:
            _set_point(data, values, path, selected)
            point = only_selected(data, selected)
            scenario = validate_scenario(point, path, warn=False, positions=selected)
            points.append(Point(index, values, scenario))
        except ScenarioError as exc:
            for path_, message in exc.problems:
                problem = (_sweep_key_at(path_, message, values), message)
                problems.setdefault(problem, f"sweep point {index}: {where}")
    if problems:
        raise ScenarioError(path, [(p, f"{m} [{w}]") for (p, m), w in problems.items()])
    return points


def _set_point(data: dict, values: dict, path: Path, selected) -> None:
    """Set a point's ``values`` in ``data``; ScenarioError if a key fails or two keys set
    the same choice of one entry (the later would silently undo the earlier)."""
    done: list[tuple[str, Target]] = []
    for key, value in values.items():
        try:
            targets = assign(data, key, copy.deepcopy(value), selected)
        except ValueError as exc:
            raise ScenarioError(path, [("sweep", str(exc))]) from None
        for target in targets:
            other = next((k for k, t in done if t.clashes(target)), None)
            if other is not None:
                message = f"sets {_choice(target)}, as sweep key {other} does: sweep one of them"
                raise ScenarioError(path, [(f"sweep {key}", message)])
        done += [(key, t) for t in targets]


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
    tasks: list[tuple[Scenario, list[tuple[TaskKey, dict, dict]]]],
) -> list[tuple[TaskKey, tuple[str, str]]]:
    """Simulate ``tasks`` over the same replications together: each is a policy of a point's
    scenario, the points training the same model (:attr:`Plan.same_model`), so that they
    share each trained replication's failure-free model. Per task, where its rows go:
    (key, row cells, timeline cells) of the task, then of each task of another point that
    repeats it (:func:`_repeated`). Returns (key, the CSV text of its rows and, if it holds
    replication 0, of that timeline: :func:`~ftsim.experiments.store.shard_texts`) for
    every key of ``tasks``."""
    policies = [(scenario, shards[0][0].policy) for scenario, shards in tasks]
    reps = tasks[0][1][0][0].reps
    rows, timelines = simulate_policies(policies, reps, TIMELINE_REP)
    return [
        (key, shard_texts([cells | r for r in mine], [timeline_cells | r for r in timeline]))
        for (_, shards), mine, timeline in zip(tasks, rows, timelines, strict=True)
        for key, cells, timeline_cells in shards
    ]


class Progress(Protocol):
    """What :func:`run_sweep` reports (:class:`ftsim.experiments.progress.Progress`)."""

    def planned(self, tasks: int, reps: int, reused: int, trained: int = 0) -> None:
        """A round of ``tasks`` to compute (``reps`` replications, ``trained`` of which train
        the model); ``reused`` found stored."""

    def finished(self, reps: int, trained: bool) -> None:
        """A task of ``reps`` replications finished (``trained``: it trained the model)."""


def run_sweep(
    plan: Plan,
    store: RunStore,
    executor: str = "process",
    jobs: int | None = None,
    dask_address: str | None = None,
    batch: int = 10,
    progress: Progress | None = None,
) -> tuple[int, int, int]:
    """Run the replications not yet in ``store`` on the ``executor`` (:func:`workers`);
    returns (computed, reused, copied) replications (:func:`compute`)."""
    with workers(executor, jobs or default_jobs(), dask_address) as pool:
        return compute(plan, store, pool, batch, progress)


def compute(
    plan: Plan,
    store: RunStore,
    pool=None,
    batch: int = 10,
    progress: Progress | None = None,
    first: Round | None = None,
) -> tuple[int, int, int]:
    """Run the replications not yet in ``store`` on ``pool`` (from :func:`workers`; None:
    in this process), storing each task as it finishes; returns (computed, reused, copied)
    replications, ``copied`` of the computed ones written from another point's simulation
    (:func:`_repeated`). ``first``: the first round, already started (:func:`start`) for a
    ``store`` that holds nothing yet. With a pool, the shards are synced to disk behind
    this process (:attr:`~ftsim.experiments.store.RunStore.behind`), and while the workers
    compute the first round, it prepares what :func:`finish` needs (pyarrow, imported and
    initialised: :func:`~ftsim.experiments.output.prepare_tables`); after the last, a local
    pool is shut down without waiting, its workers exiting while the caller merges the
    results."""
    round_ = first if first is not None else start(plan, pool, batch, store.covered())
    store.behind = pool is not None  # this process has time to spare: sync behind it
    if pool is not None and round_.tasks:
        from ftsim.experiments.output import prepare_tables

        prepare_tables()
    planned = _targets(plan)
    computed = reused = copied = 0
    while round_ is not None:
        reused += round_.reused
        copied += round_.copied
        if progress is not None:
            reps = sum(len(key.reps) for key in round_.tasks)
            trained = sum(len(key.reps) for key in round_.tasks if _trains(plan, key))
            progress.planned(len(round_.tasks), reps, round_.reused, trained)
        for key, (rows_csv, timeline_csv) in round_.results:
            store.write_shard(key, rows_csv, timeline_csv)
            computed += len(key.reps)
            if progress is not None:
                progress.finished(len(key.reps), _trains(plan, key))
        targets = _more_replications(plan, store, planned, batch)
        round_ = _round(plan, store.covered(), targets, planned, pool, batch) if targets else None
    if isinstance(pool, ProcessPoolExecutor):
        pool.shutdown(wait=False)  # no task follows: its workers exit while the results merge
    return computed, reused, copied


@dataclass
class Round:
    """A round of tasks (:func:`start`), submitted to the executor when it was made."""

    tasks: list[TaskKey]
    reused: int
    """Replications of the round found stored, not computed again (a resumed sweep)."""
    results: Iterator[tuple[TaskKey, tuple[str, str]]]
    """(key, shard texts) of each task as it finishes (:func:`run_task`)."""
    copied: int = 0
    """Replications of the round written from another point's simulation of the same
    policy (:func:`_repeated`)."""


def start(plan: Plan, pool, batch: int = 10, covered: Mapping | None = None) -> Round:
    """The first round of ``plan``: each planned replication not in ``covered`` (finished
    replications per (point, policy index), as :meth:`RunStore.covered` gives them), in
    tasks submitted to ``pool`` at once, so that the workers compute while the caller
    prepares where the results go (:func:`compute` collects them)."""
    return _round(plan, covered or {}, _targets(plan), {}, pool, batch)


def _targets(plan: Plan) -> dict[tuple[int, int], int]:
    """Replications to run per (point, policy index) before any added for a target
    half-width."""
    return {(p.index, q): p.scenario.run.replications for p in plan.points for q in plan.policies}


def _round(
    plan: Plan,
    covered: Mapping,
    targets: dict[tuple[int, int], int],
    planned: dict[tuple[int, int], int],
    pool,
    batch: int,
) -> Round:
    """The tasks of replications from ``planned`` (0 if absent) up to ``targets`` per (point,
    policy) that are not in ``covered``, submitted to ``pool``; ``planned`` is moved on to
    the targets."""
    tasks, found = [], 0
    for pair, stop in targets.items():
        have = covered.get(pair, set())
        wanted = range(planned.get(pair, 0), stop)
        found += sum(1 for r in wanted if r in have)
        tasks += _tasks(plan, pair, [r for r in wanted if r not in have], batch)
        planned[pair] = stop
    run, copies = _repeated(plan, tasks)
    copied = sum(len(key.reps) for keys in copies.values() for key in keys)
    return Round(tasks, found, _submit(plan, run, copies, pool), copied)


def n_tasks(plan: Plan, batch: int) -> int:
    """Tasks of the planned replications (before any added for a target half-width)."""
    return len(_planned_tasks(plan, batch))


def n_units(plan: Plan, batch: int) -> int:
    """Units of work workers may take among the planned tasks: the tasks of a trained
    point's policies over the same replications run together and count once (points that
    train the same model may share them: :func:`_groups`, not when there are workers to
    spare), and a task that repeats another point's is not run (:func:`_repeated`)."""
    run = _repeated(plan, _planned_tasks(plan, batch))[0]
    return len(_grouped(plan, run, range(len(plan.points))))


def _planned_tasks(plan: Plan, batch: int) -> list[TaskKey]:
    return [
        key
        for p in plan.points
        for q in plan.policies
        for key in _tasks(plan, (p.index, q), list(range(p.scenario.run.replications)), batch)
    ]


SERIAL_TIMING_REPLICATIONS = 100
"""A study that trains nothing and has at most this many replications (summed over points
and policies) runs in the calling process unless ``jobs`` is given: there a pool of workers
would save at most a few milliseconds of the user's wait, for some 50 ms more CPU. Measured
(quiet 2-core machine, medians of 5-7 runs alternating, ``run prod50h --no-trainer --set
run.replications=R``, whole command): with two workers rather than one, 60 replications
took 358 against 368 ms, 150 took 418 against 474 ms, 300 took 506 against 623 ms, 600 took
661 against 909 ms, for 46-100 ms more CPU. Starting the pool costs little wall time since
the workers inherit the parent's BLAS limit instead of restarting OpenBLAS's threads
(:func:`ftsim.experiments.pool.process_pool`)."""


def local_workers(plan: Plan, jobs: int | None, batch: int) -> tuple[int, str | None]:
    """Local workers for ``jobs`` (default: the CPUs, or 1 for a small timing study, see
    :data:`SERIAL_TIMING_REPLICATIONS`): at most the CPUs and the first round's tasks
    (:func:`n_units`), as more would only compete for the same cores. Returns the number
    and, when a requested ``jobs`` was lowered, a note saying so."""
    limits = {"the CPUs available": default_jobs(), "the tasks to run": n_units(plan, batch)}
    if jobs is None and _small_timing_study(plan):
        return 1, None
    wanted = jobs or limits["the CPUs available"]
    reason = min(limits, key=limits.get)
    if wanted <= limits[reason]:
        return wanted, None
    note = f"{option('jobs', jobs)}: using {limits[reason]} ({reason})" if jobs else None
    return limits[reason], note


def _small_timing_study(plan: Plan) -> bool:
    """Whether ``plan`` trains nothing and has at most :data:`SERIAL_TIMING_REPLICATIONS`
    replications (a target half-width may add more: then it is not small)."""
    if plan.target_halfwidth is not None:
        return False
    if any(p.scenario.trains_model(0) for p in plan.points):
        return False
    total = sum(p.scenario.run.replications for p in plan.points) * len(plan.policies)
    return total <= SERIAL_TIMING_REPLICATIONS


def _tasks(plan: Plan, pair: tuple[int, int], reps: list[int], batch: int) -> list[TaskKey]:
    """Tasks for the sorted ``reps``: contiguous runs, cut at multiples of ``batch``; a
    replication that trains the model is a task of its own (it takes seconds to minutes,
    where a batch of timing replications takes milliseconds: spread over the workers)."""
    trains = plan.points[pair[0]].scenario.trains_model
    tasks: list[TaskKey] = []
    for rep in reps:
        last = tasks[-1] if tasks else None
        if (
            last
            and rep == last.stop
            and rep // batch == last.start // batch
            and not trains(rep)
            and not trains(last.start)
        ):
            tasks[-1] = TaskKey(*pair, last.start, rep + 1)
        else:
            tasks.append(TaskKey(*pair, rep, rep + 1))
    return tasks


def _trains(plan: Plan, key: TaskKey) -> bool:
    """Whether the task's replications train the model."""
    return plan.points[key.point].scenario.trains_model(key.start)


def _groups(plan: Plan, tasks: list[TaskKey], workers: int | None = None) -> list[list[TaskKey]]:
    """Tasks run together: where the replications train the model, those over the same
    replications of the points that train the same model (:attr:`Plan.same_model`): one
    failure-free trainer per replication serves every policy of them all; timing-only tasks
    run alone (smaller tasks spread better over workers). When that leaves fewer trained
    groups than ``workers`` (some would wait: a Dask cluster of 50 for a sweep of 10 trained
    replications), those of one point over the same replications instead."""
    groups = _grouped(plan, tasks, plan.same_model)
    if workers is not None and sum(_trains(plan, g[0]) for g in groups) < workers:
        return _grouped(plan, tasks, range(len(plan.points)))
    return groups


def _grouped(plan: Plan, tasks: list[TaskKey], together: Sequence[int]) -> list[list[TaskKey]]:
    """Trained tasks over the same replications of points ``together`` names alike (per
    point: the first point of its kind) in one group each; timing-only tasks alone."""
    groups: list[list[TaskKey]] = []
    shared: dict[tuple[int, int, int], list[TaskKey]] = {}
    for key in tasks:
        if not _trains(plan, key):
            groups.append([key])
            continue
        kind = (together[key.point], key.start, key.stop)
        group = shared.get(kind)
        if group is None:
            group = shared[kind] = []
            groups.append(group)
        group.append(key)
    return groups


def _repeated(plan: Plan, tasks: list[TaskKey]) -> tuple[list[TaskKey], dict]:
    """The tasks to run among ``tasks``, and for each the tasks that repeat it: those of
    the same policy and replications at a later point where the policy repeats an earlier
    one (:attr:`Plan.repeats`), when that point's task is among ``tasks`` too (a resumed
    sweep may hold it already: then the repeat runs)."""
    wanted = set(tasks)

    def source(key: TaskKey) -> TaskKey | None:  # the first point's task (never a repeat)
        earlier = plan.repeats.get((key.point, key.policy))
        return TaskKey(earlier, key.policy, key.start, key.stop) if earlier is not None else None

    run = [key for key in tasks if source(key) not in wanted]
    copies: dict[TaskKey, list[TaskKey]] = {key: [] for key in run}
    for key in tasks:
        if source(key) in wanted:
            copies[source(key)].append(key)
    return run, copies


def _submit(
    plan: Plan, run: list[TaskKey], copies: dict[TaskKey, list[TaskKey]], pool
) -> Iterator[tuple[TaskKey, tuple]]:
    """Submit the tasks to ``run`` to ``pool`` now, those that train the model first, the
    costliest first (:func:`_start_order`); without a pool, or for a single unit of work,
    they run in this process as they are iterated. A task's rows are written for its
    ``copies`` too, the tasks that repeat it (:func:`_repeated`). (key, result) of every
    task and copy, as they finish."""
    groups = _groups(plan, run, capacity(pool))
    if pool is not None:
        groups.sort(key=lambda group: _start_order(plan, group))  # stable: plan order
    points = plan.points
    args = [
        (
            [
                (
                    points[key.point].scenario,
                    [
                        (k, plan.row_cells(points[k.point], k.policy),
                         plan.timeline_cells(points[k.point]))
                        for k in (key, *copies[key])
                    ],
                )
                for key in group
            ],
        )
        for group in groups
    ]  # fmt: skip
    if pool is None or len(groups) < 2:
        return _serial(args)
    return _finished(submit_all(pool, run_task, args), pool)


def _start_order(plan: Plan, group: list[TaskKey]) -> tuple[bool, float]:
    """Sort key of a group of tasks submitted to a pool: those that train the model first
    (seconds to minutes each, where a batch of timing replications takes milliseconds:
    started last, one would keep a worker busy long after the others ran out of tasks),
    the most trainer steps first (:func:`~ftsim.experiments.runner.training_cost`): the
    workers then end together (prod50h on 2 workers: the last ended 0.5 s after the other
    in plan order, together in this one). A group of several points trains one
    failure-free model and each point's policies from that point's first failure."""
    key = group[0]
    if not _trains(plan, key):
        return True, 0.0
    policies = collections.Counter(k.point for k in group)
    steps = plan.points[key.point].scenario.trainer.steps
    own = [
        training_cost(plan.points[p].scenario, key.start, n) - steps for p, n in policies.items()
    ]
    return False, -(steps + sum(own))


def _serial(args: list[tuple]) -> Iterator[tuple[TaskKey, tuple]]:
    """(key, result) of each task, run in this process as they are asked for."""
    for arg in args:
        yield from run_task(*arg)


def _finished(futures: list, pool) -> Iterator[tuple[TaskKey, tuple]]:
    """(key, result) of each task of the ``futures`` (of :func:`run_task`) of ``pool``, as
    they finish (:func:`~ftsim.experiments.pool.finished`: signals deferred in
    every call into them; a dead worker said); the tasks not yet started are cancelled if
    the caller stops asking."""
    for _future, results in finished(futures, pool):
        yield from results


@contextmanager
def workers(kind: str, jobs: int, dask_address: str | None):
    """Where a study's tasks run: None (in this process) when ``kind`` is "process" and
    ``jobs`` is 1, else a concurrent.futures-style executor: a local process pool (its
    workers started at once, see :mod:`ftsim.experiments.pool`) or a Dask cluster's."""
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
            f"{option('executor', 'dask')} needs dask.distributed: pip install 'ftsim[dask]'"
        ) from None
    return distributed


def _dask_client(target):
    """A Dask client of ``target`` (an address or a local cluster); StoreError if it cannot
    connect within ``DASK_CONNECT_TIMEOUT_S``."""
    try:
        return _distributed().Client(target, timeout=DASK_CONNECT_TIMEOUT_S)
    except (OSError, ValueError, TypeError) as exc:
        raise StoreError(f"{option('dask_address', target)}: cannot connect ({exc})") from None


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
    from ftsim.experiments.stats import t_critical, t_interval

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
            root_n = t_critical(0.95, n - 1) * s["std"] / plan.target_halfwidth
            enough = math.ceil(root_n**2) if root_n < math.sqrt(plan.max_reps) else plan.max_reps
            needed = -(-max(needed, enough) // batch) * batch
        targets[pair] = min(needed, plan.max_reps)
    return targets


# -- results -------------------------------------------------------------------------------


def manifest(plan: Plan, argv: list[str] | None, started: str) -> dict:
    """The manifest of a study's folder, as written when it starts (a sweep) or ends (a
    run); ``argv`` is the command line, None for a call of the Python API."""
    from ftsim.experiments.output import git_commit, versions
    from ftsim.scenario.loader import input_digests

    inputs = {k: v for p in plan.points for k, v in input_digests(p.scenario).items()}
    return {
        "command": plan.command,
        "scenario": plan.base.name,
        "scenario_file": str(plan.path),
        "config_hash": plan.config_hash,
        **({"inputs": inputs} if inputs else {}),
        "seed": plan.base.run.seed,
        "replications": plan.base.run.replications,
        "columns": plan.columns,
        "points": [
            {"point": p.index, "values": p.values, "replications": p.scenario.run.replications}
            for p in plan.points
        ],
        "policies": [plan.base.policy_labels[i] for i in plan.policies],
        "policy_positions": plan.positions,
        "reference": plan.reference,
        "target_halfwidth": plan.target_halfwidth,
        "max_reps": plan.max_reps,
        "argv": argv,
        "git_commit": git_commit(),
        "versions": versions(),
        "started_utc": started,
        "sessions": [],
    }


def finish(plan: Plan, store: RunStore) -> list[dict]:
    """Merge the shards into runs.csv/.parquet and timeline.csv (their texts joined,
    :meth:`~ftsim.experiments.store.RunStore.rows_text`); write and return the summary
    as records (:func:`ftsim.experiments.stats.summary_records`: the same columns for a run
    and a sweep), computed from runs.csv's values as pyarrow reads them (as pandas would
    read them from runs.parquet, which is written meanwhile), without importing pandas.
    The last shards are synced to disk meanwhile too (:meth:`RunStore.syncing`)."""
    from ftsim.experiments.output import atomic_write_text, csv_and_parquet, write_csv
    from ftsim.experiments.stats import arrow_columns, summary_records

    with store.syncing(), csv_and_parquet(store.root / "runs", store.rows_text()) as runs:
        atomic_write_text(store.root / "timeline.csv", store.timeline_text())
        summary = summary_records(arrow_columns(runs), plan.columns, plan.reference)
        if plan.target_halfwidth is not None:  # the cap, where the tool stopped adding
            for row in summary:
                row["stopped_at_max_reps"] = _stopped_at_cap(plan, row)
        write_csv(store.root / "summary.csv", summary)
    return summary


def _stopped_at_cap(plan: Plan, row: dict) -> bool:
    """Whether a (point, policy) of a ``--target-halfwidth`` sweep reached ``--max-reps``
    with its overhead interval still wider than the target."""
    half = row.get("overhead_frac_ci95_half", math.nan)
    return row["n"] + row["n_unfinished"] >= plan.max_reps and not half <= plan.target_halfwidth


def short_of_target(plan: Plan, summary: list[dict]) -> list[str]:
    """One line per (point, policy) whose overhead interval is still wider than
    ``--target-halfwidth`` when its replications reached ``--max-reps`` (the cap), from
    the summary's records (``stopped_at_max_reps``)."""
    if plan.target_halfwidth is None:
        return []
    lines = []
    for row in summary:
        half = row.get("overhead_frac_ci95_half", math.nan)
        if _stopped_at_cap(plan, row):
            lines.append(
                f"{row['policy']} at point {row['point']}: {option('max_reps', plan.max_reps)} "
                f"reached with a 95% CI half-width of {half:.3g}, above "
                f"{option('target_halfwidth', plan.target_halfwidth)}"
            )
    return lines


def pls_over_target(plan: Plan, summary: list[dict]) -> list[str]:
    """One line per (point, policy) whose ``target_pls`` was missed beyond doubt: the 95% CI
    of its ``pls_model`` lies above the target. CPR plans its interval on the failure
    sources' mean rate per hour of the job's wall clock: runs that saw more failures than
    that (beyond :data:`MORE_FAILURES`, e.g. Weibull nodes new at t = 0) are said so;
    otherwise time the job spends waiting for replacements (cluster operations) or
    recovering adds failures per hour of training, hence lost updates."""
    lines = []
    for row in summary:
        point = plan.points[int(row.get("point", 0))]
        labels = point.scenario.policy_labels
        if row["policy"] not in labels:
            continue
        target = getattr(point.scenario.policies[labels.index(row["policy"])], "target_pls", None)
        low = row.get("pls_model_ci95_low", math.nan)
        if target is None or not low > target:
            continue
        at = f" at point {row['point']}" if plan.command == "sweep" else ""
        said = (
            f"{row['policy']}{at}: pls_model {row['pls_model_mean']:.3g} (95% CI from "
            f"{low:.3g}, n = {row['n']}) is above its target_pls {target:g}: "
        )
        planned = row.get("wall_h_mean", math.nan) * 3600.0 / job_mtbf_s(point.scenario)
        seen = row.get("n_failures_ci95_low", math.nan)
        if seen > (1 + MORE_FAILURES) * planned:
            lines.append(
                said + f"its runs saw {row['n_failures_mean']:.3g} failures each (95% CI from "
                f"{seen:.3g}), where the interval was planned on the failure sources' mean "
                f"rate, {planned:.3g} in that time (e.g. Weibull nodes new at t = 0)"
            )
            continue
        waits = (
            "while the job waited for its replacements (cluster operations)"
            if point.scenario.cluster.operations is not None
            else "while the job recovered"
        )
        lines.append(
            said + "the interval is planned on the failures per hour of the job's wall clock, "
            f"and failures that strike {waits} lose more updates per hour of training"
        )
    return lines


MORE_FAILURES = 0.2
"""How many more failures than planned (a share) the runs must have seen, beyond doubt (the
95% CI of ``n_failures``), for :func:`pls_over_target` to name them as the reason."""


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


def _described(values: dict) -> str:
    """A point's values for people: ``policies.*.interval=1 h, failures.0.count=5``."""
    return ", ".join(f"{k}={_cell(v)}" for k, v in values.items())


def _point_notices(points: list[Point]) -> list[Notice]:
    """What the policies decided for the user at the sweep's points (:func:`policy_notices`),
    each notice once: at the point it was said, at the points (several), or at every point
    (a policy the same at each said the same thing once per point)."""
    said: dict[tuple[type, str], tuple[Notice, list[Point]]] = {}
    for point in points:
        for notice in policy_notices(point.scenario):
            said.setdefault((type(notice), str(notice)), (notice, []))[1].append(point)
    notes = []
    for notice, where in said.values():
        if len(where) == len(points) > 1:
            notes.append(notice.at("every point"))
        elif len(where) > 1:
            notes.append(notice.at(f"points {', '.join(str(p.index) for p in where)}"))
        else:
            notes.append(notice.at(f"point {where[0].index} ({_described(where[0].values)})"))
    return notes


def policy_notices(scenario) -> list[Notice]:
    """What each policy of ``scenario`` decided for the user when it planned (CPR's fall-back
    to full recovery), and, when replications train the embedded model, what of its setting
    the trainer's small tables cannot represent (:meth:`~ftsim.policies.base.Plan.
    trained_notices`). Builds each policy once, without simulating: the decision depends on
    the scenario only, not on the replication."""
    from ftsim.policies.inputs import PlanInputs

    inputs = PlanInputs.of(scenario)
    rows = _trainer_rows_per_shard(scenario) if scenario.trains_model(0) else None
    found = []
    for params in scenario.policies:
        plan = params.plan(inputs)
        said = plan.notices() + (plan.trained_notices(rows) if rows is not None else [])
        found += said
    return found


def _trainer_rows_per_shard(scenario) -> float:
    """Rows of the embedded trainer's tables per embedding shard (one shard per PS)."""
    return sum(scenario.trainer.data.table_sizes()) / scenario.cluster.emb_ps
