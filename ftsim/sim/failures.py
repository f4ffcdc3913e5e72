"""Failure processes: when nodes fail and which ones.

Every source yields :class:`Failure` records in time order, drawn from its own random
stream, independently of the policy being simulated. The simulator merges the sources and
consumes the merged sequence as far as the run lasts, so every policy simulated with the
same seed sees the same failures (common random numbers). Times are wall-clock seconds
from the start of the job.

Sources (``kind``):

- ``exponential`` / ``weibull``: each node of a role has independent lifetimes; a failed
  node is replaced and its successor starts a fresh lifetime at the failure instant
  (renewal process). With exponential lifetimes the job sees a Poisson process of rate
  N/m (N nodes, per-node MTBF m).
- ``correlated``: failure domains (e.g. racks) of ``domain_size`` consecutive nodes of a
  role; each domain fails as a Poisson process and takes ``nodes_per_failure`` of its nodes.
- ``scheduled``: given times and victims, or ``count`` failures each taking
  ``nodes_per_failure`` random nodes of a role at random (or evenly spaced) times in a
  window, as in CPR's evaluation.
- ``trace``: replay of a CSV with a time column (``time_s``, ``time_min`` or ``time_h``)
  and a ``node`` (``emb_ps3``) or ``role`` (a random node of that role) column.
- ``failure_log``: replay of a public failure log (LANL's failure data: node, failure
  start, repair end), its nodes mapped onto the cluster's, its repair times as the
  rescheduling delays (:mod:`ftsim.sim.failure_log`).
"""

from __future__ import annotations

import contextlib
import csv
import heapq
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator

from ftsim.scenario.files import TextFileError, read_text
from ftsim.scenario.quantities import Seconds
from ftsim.scenario.registry import register_failure_sources
from ftsim.scenario.units import format_duration
from ftsim.sim import failure_log
from ftsim.sim.nodes import Role, parse_node, role_range

if TYPE_CHECKING:
    from ftsim.scenario.schema import Scenario

_BLOCK = 8
"""Lifetimes drawn per node (or gaps per domain process) per vectorized block. It fixes the
order of draws from the stream: changing it changes the failures drawn for a seed (not their
distribution)."""


@dataclass(frozen=True, slots=True)
class Failure:
    """Nodes ``nodes`` (global indices) fail at wall time ``time_s``."""

    time_s: float
    nodes: tuple[int, ...]
    source: str
    reschedule_s: float | None = None
    """Delay until the failed nodes are replaced, seconds: drawn by the simulator from
    ``cluster.reschedule`` when None; a source that knows it (a failure log's repair time)
    sets it, and the simulator keeps it."""


class _Source(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    def problems(self, scenario: Scenario) -> list[tuple[str, str]]:
        """Inconsistencies with the rest of the scenario, as (field, message)."""
        return []

    def events(self, rng: np.random.Generator, scenario: Scenario) -> Iterator[Failure]:
        raise NotImplementedError

    def rate_per_s(self, scenario: Scenario) -> float:
        """Mean failures per second this source produces."""
        raise NotImplementedError

    def victims(self, scenario: Scenario, role: str) -> float:
        """Expected nodes of ``role`` taken by one failure of this source."""
        raise NotImplementedError

    def expected_failures(self, scenario: Scenario, horizon_s: float) -> float:
        """Mean failures this source produces in the first ``horizon_s`` seconds."""
        return self.rate_per_s(scenario) * horizon_s

    def rate_field(self) -> str:
        """The field that sets how often this source fails (named in messages about it)."""
        raise NotImplementedError


def _share_of_role(scenario: Scenario, pool: range, role: str) -> float:
    """Fraction of the nodes in ``pool`` that have ``role``."""
    c = scenario.cluster
    wanted = set(role_range(c.trainers, c.emb_ps, role))
    return sum(n in wanted for n in pool) / len(pool)


class _LifetimeSource(_Source):
    role: Role = Field("any", description="nodes that can fail: trainer, emb_ps or any")
    node_mtbf: Seconds | None = Field(None, description="mean time between failures of a node")
    job_mtbf: Seconds | None = Field(
        None, description="MTBF of the whole role group; node_mtbf = job_mtbf × nodes"
    )

    def problems(self, scenario):
        if (self.node_mtbf is None) == (self.job_mtbf is None):
            return [("node_mtbf", "give exactly one of node_mtbf and job_mtbf")]
        mtbf = getattr(self, self.rate_field())
        if mtbf <= 0:
            return [(self.rate_field(), f"MTBF must be positive (got {format_duration(mtbf)})")]
        return []

    def rate_field(self):
        return "node_mtbf" if self.node_mtbf is not None else "job_mtbf"

    def mean_lifetime_s(self, scenario: Scenario) -> float:
        """Mean lifetime of one node, seconds."""
        if self.node_mtbf is not None:
            return self.node_mtbf
        return self.job_mtbf * len(self._nodes(scenario))

    def _nodes(self, scenario) -> range:
        return role_range(scenario.cluster.trainers, scenario.cluster.emb_ps, self.role)

    def rate_per_s(self, scenario):
        return len(self._nodes(scenario)) / self.mean_lifetime_s(scenario)

    def victims(self, scenario, role):
        return _share_of_role(scenario, self._nodes(scenario), role)

    def _standard_lifetimes(self, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        raise NotImplementedError

    def events(self, rng, scenario):
        nodes = np.asarray(self._nodes(scenario))
        mean = self.mean_lifetime_s(scenario)
        clock = np.zeros(len(nodes))
        carry_t, carry_node = np.empty(0), np.empty(0, dtype=int)
        while True:
            lifetimes = self._standard_lifetimes(rng, (len(nodes), _BLOCK)) * mean
            times = clock[:, None] + np.cumsum(lifetimes, axis=1)
            clock = times[:, -1].copy()
            # Every event up to the earliest node clock is final: later draws come after it.
            t = np.concatenate([carry_t, times.ravel()])
            who = np.concatenate([carry_node, np.repeat(nodes, _BLOCK)])
            order = np.argsort(t, kind="stable")
            t, who = t[order], who[order]
            ready = int(np.searchsorted(t, clock.min(), side="right"))
            for time_s, node in zip(t[:ready].tolist(), who[:ready].tolist(), strict=True):
                yield Failure(time_s, (node,), self.kind)
            carry_t, carry_node = t[ready:], who[ready:]


class ExponentialFailures(_LifetimeSource):
    """Exponential node lifetimes (memoryless): job failure rate = nodes / node_mtbf."""

    kind: Literal["exponential"]

    def _standard_lifetimes(self, rng, shape):
        return rng.standard_exponential(shape)


class WeibullFailures(_LifetimeSource):
    """Weibull node lifetimes with ``shape`` k (k < 1: infant mortality) and mean MTBF."""

    kind: Literal["weibull"]
    shape: float = Field(gt=0, description="Weibull shape k")

    def _standard_lifetimes(self, rng, shape):
        # Weibull with unit mean: scale 1/Γ(1 + 1/k).
        return rng.weibull(self.shape, shape) / math.gamma(1 + 1 / self.shape)


class CorrelatedFailures(_Source):
    """Failure domains: ``domain_size`` consecutive nodes of ``role`` share a fate."""

    kind: Literal["correlated"]
    role: Role = Field("any", description="nodes grouped into domains: trainer, emb_ps or any")
    domain_size: int = Field(ge=1, description="nodes per failure domain (e.g. a rack)")
    domain_mtbf: Seconds = Field(description="mean time between failures of one domain")
    nodes_per_failure: int | None = Field(
        None, ge=1, description="nodes a domain failure takes (default: the whole domain)"
    )

    def problems(self, scenario):
        found = []
        n = len(role_range(scenario.cluster.trainers, scenario.cluster.emb_ps, self.role))
        if self.domain_size > n:
            found.append(("domain_size", f"larger than the {n} nodes of role {self.role}"))
        if self.nodes_per_failure and self.nodes_per_failure > self.domain_size:
            found.append(("nodes_per_failure", "cannot exceed domain_size"))
        if self.domain_mtbf <= 0:
            found.append(("domain_mtbf", "must be positive"))
        return found

    def _pool(self, scenario) -> range:
        return role_range(scenario.cluster.trainers, scenario.cluster.emb_ps, self.role)

    def rate_field(self):
        return "domain_mtbf"

    def rate_per_s(self, scenario):
        return math.ceil(len(self._pool(scenario)) / self.domain_size) / self.domain_mtbf

    def victims(self, scenario, role):
        taken = min(self.nodes_per_failure or self.domain_size, self.domain_size)
        return taken * _share_of_role(scenario, self._pool(scenario), role)

    def events(self, rng, scenario):
        nodes = self._pool(scenario)
        domains = [nodes[i : i + self.domain_size] for i in range(0, len(nodes), self.domain_size)]
        mean_gap_s = self.domain_mtbf / len(domains)
        t = 0.0
        while True:
            gaps = rng.standard_exponential(_BLOCK) * mean_gap_s
            picks = rng.integers(0, len(domains), _BLOCK)
            for gap, pick in zip(gaps, picks, strict=True):
                t += float(gap)
                domain = domains[int(pick)]
                take = min(self.nodes_per_failure or len(domain), len(domain))
                victims = rng.choice(len(domain), take, replace=False)
                yield Failure(t, tuple(sorted(domain[int(v)] for v in victims)), self.kind)


class ScheduledFailures(_Source):
    """Injected failures: explicit ``times`` (and optional explicit ``nodes``), or ``count``
    failures in ``[start, end]`` (default: the failure-free training time)."""

    kind: Literal["scheduled"]
    times: list[Seconds] | None = Field(None, description="failure instants (wall clock)")
    nodes: list[list[str]] | None = Field(
        None, description="victims per time, e.g. [[emb_ps0, emb_ps3]]; default random"
    )
    count: int | None = Field(None, ge=1, description="failures at random times (instead of times)")
    role: Role = Field("emb_ps", description="role of the random victims")
    nodes_per_failure: int = Field(1, ge=1, description="distinct random victims per failure")
    start: Seconds = Field(0.0, description="start of the window for count failures")
    end: Seconds | None = Field(
        None, description="end of the window (default: the failure-free training time)"
    )
    spacing: Literal["uniform", "even"] = Field(
        "uniform", description="uniform: random times; even: end/(count+1) apart"
    )

    def problems(self, scenario):
        c = scenario.cluster
        found = []
        if (self.times is None) == (self.count is None):
            found.append(("times", "give exactly one of times and count"))
        if self.nodes is not None:
            if self.times is None or len(self.nodes) != len(self.times):
                found.append(("nodes", "needs one list of victims per entry of times"))
            for i, victims in enumerate(self.nodes):
                for j, name in enumerate(victims):
                    try:
                        parse_node(c.trainers, c.emb_ps, name)
                    except ValueError as exc:
                        found.append((f"nodes.{i}.{j}", str(exc)))
        n = len(role_range(c.trainers, c.emb_ps, self.role))
        if self.nodes_per_failure > n:
            found.append(("nodes_per_failure", f"exceeds the {n} nodes of role {self.role}"))
        end = self.end if self.end is not None else scenario.job.work_s
        if end <= self.start:
            found.append(("end", "must be after start"))
        return found

    def rate_per_s(self, scenario):
        end = self.end if self.end is not None else scenario.job.work_s
        return self._count() / (end - self.start)

    def _count(self) -> int:
        return self.count if self.count is not None else len(self.times)

    def expected_failures(self, scenario, horizon_s):
        return self._count()

    def rate_field(self):
        return "count" if self.count is not None else "times"

    def victims(self, scenario, role):
        c = scenario.cluster
        if self.nodes is None:
            pool = role_range(c.trainers, c.emb_ps, self.role)
            return self.nodes_per_failure * _share_of_role(scenario, pool, role)
        wanted = set(role_range(c.trainers, c.emb_ps, role))
        hits = [
            parse_node(c.trainers, c.emb_ps, n) in wanted for group in self.nodes for n in group
        ]
        return sum(hits) / len(self.nodes)

    def events(self, rng, scenario):
        c = scenario.cluster
        pool = role_range(c.trainers, c.emb_ps, self.role)
        end = self.end if self.end is not None else scenario.job.work_s
        if self.times is not None:
            times = list(self.times)
        elif self.spacing == "even":
            step = (end - self.start) / (self.count + 1)
            times = [self.start + step * (i + 1) for i in range(self.count)]
        else:
            times = list(self.start + (end - self.start) * rng.random(self.count))
        order = sorted(range(len(times)), key=lambda i: times[i])
        for i in order:
            if self.nodes is not None:
                victims = tuple(sorted(parse_node(c.trainers, c.emb_ps, n) for n in self.nodes[i]))
            else:
                picks = rng.choice(len(pool), self.nodes_per_failure, replace=False)
                victims = tuple(sorted(pool[int(p)] for p in picks))
            yield Failure(float(times[i]), victims, self.kind)


_TIME_COLUMNS = {"time_s": 1.0, "time_min": 60.0, "time_h": 3600.0}

MAX_TRACE_ROWS = 1_000_000
"""Most failures a trace may list (a replication simulates each one)."""


class TraceFailures(_Source):
    """Replay of a failure trace CSV (path relative to the scenario file).

    Rows must be in time order, with finite, non-negative times: a NaN or negative time is
    a broken trace, not a failure at time 0.
    """

    kind: Literal["trace"]
    file: str = Field(description="CSV path, relative to the scenario file")
    _rows: list[tuple[float, str, str]] = PrivateAttr(default_factory=list)

    @field_validator("file")
    @classmethod
    def _resolve(cls, value: str, info: ValidationInfo) -> str:
        """The absolute path of a readable, well-formed trace."""
        base = Path((info.context or {}).get("base_dir", "."))
        path = (base / value).resolve()
        if not path.is_file():
            raise ValueError(f"trace file not found: {path}")
        _read_trace(path)
        return str(path)

    def model_post_init(self, __context) -> None:
        self._rows = _read_trace(Path(self.file))

    def problems(self, scenario):
        c = scenario.cluster
        found = []
        for time_s, column, value in self._rows:
            if column == "node":
                try:
                    parse_node(c.trainers, c.emb_ps, value)
                except ValueError as exc:
                    found.append(("file", f"at time {time_s:g} s: {exc}"))
        return found

    def rate_per_s(self, scenario):
        return len(self._rows) / max(scenario.job.work_s, self._rows[-1][0])

    def expected_failures(self, scenario, horizon_s):
        return len(self._rows)

    def rate_field(self):
        return "file"

    def victims(self, scenario, role):
        c = scenario.cluster
        wanted = set(role_range(c.trainers, c.emb_ps, role))
        share = 0.0
        for _, column, value in self._rows:
            if column == "node":
                share += parse_node(c.trainers, c.emb_ps, value) in wanted
            else:
                share += _share_of_role(scenario, role_range(c.trainers, c.emb_ps, value), role)
        return share / len(self._rows)

    def events(self, rng, scenario):
        c = scenario.cluster
        for time_s, column, value in self._rows:
            if column == "node":
                victim = parse_node(c.trainers, c.emb_ps, value)
            else:
                pool = role_range(c.trainers, c.emb_ps, value)
                victim = pool[int(rng.integers(len(pool)))]
            yield Failure(time_s, (victim,), self.kind)


def _read_trace(path: Path) -> list[tuple[float, str, str]]:
    """(time seconds, 'node' | 'role', value) per row, in time order; ValueError naming the
    file and line of the first problem."""
    try:
        text = read_text(path)
    except TextFileError as exc:
        raise ValueError(f"{path.name}: {exc}") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    fields = reader.fieldnames or []
    time_columns = [f for f in fields if f in _TIME_COLUMNS]
    victim_columns = [f for f in fields if f in ("node", "role")]
    if len(time_columns) != 1 or len(victim_columns) != 1:
        raise ValueError(
            f"{path.name}: the header needs one of {', '.join(_TIME_COLUMNS)} and one of "
            f"node, role (got {', '.join(fields) or 'nothing'})"
        )
    rows: list[tuple[float, str, str]] = []
    for line, record in enumerate(reader, start=2):
        if len(rows) == MAX_TRACE_ROWS:
            raise ValueError(f"{path.name}: more than {MAX_TRACE_ROWS:,} failures")
        try:
            rows.append(_trace_row(record, time_columns[0], victim_columns[0], rows))
        except ValueError as exc:
            raise ValueError(f"{path.name} line {line}: {exc}") from None
    if not rows:
        raise ValueError(f"{path.name}: no failures (only a header)")
    return rows


def _trace_row(record: dict, time_col: str, victim_col: str, before: list) -> tuple:
    """One trace row as (time seconds, column, value); ValueError saying what is wrong."""
    text = record[time_col]
    try:
        time_s = float(text) * _TIME_COLUMNS[time_col]
    except (TypeError, ValueError):
        raise ValueError(f"{time_col} is not a number (got {text!r})") from None
    if not math.isfinite(time_s):
        raise ValueError(f"{time_col} must be a finite number (got {text!r})")
    if time_s < 0:
        raise ValueError(f"{time_col} must not be negative (got {text!r})")
    if before and time_s < before[-1][0]:
        previous = before[-1][0] / _TIME_COLUMNS[time_col]
        raise ValueError(f"rows must be in time order ({time_col} {text} comes after {previous:g})")
    value = (record[victim_col] or "").strip()
    if victim_col == "role" and value not in ("trainer", "emb_ps", "any"):
        raise ValueError(f"role must be trainer, emb_ps or any (got {value!r})")
    if not value:
        raise ValueError(f"{victim_col} is empty")
    return time_s, victim_col, value


class FailureLogFailures(_Source):
    """Replay of a public failure log in the LANL failure-data format (one row per node
    outage: ``nodenum``, ``Prob Started``, ``Prob Fixed`` or ``Down Time``, optional
    ``System``; see `ftsim/sim/failure_log.py`). Log node n (its ``nodenum``; a node id
    that is not an integer counts as its rank among the log's sorted ids) maps onto node
    n mod N of the N nodes of ``role`` (trainers first), or onto node n when n < N
    (``mapping: first``; the job runs on the system's first N nodes), or by an explicit
    ``nodes`` map; a row whose node maps nowhere is skipped and counted. The
    ``start`` time (default: the first replayed failure) is t = 0 and earlier rows are
    skipped; each failure's logged repair time (fixed − started) is the delay until its
    node is replaced (``reschedule: logged``)."""

    kind: Literal["failure_log"]
    path: str = Field(description="the log (CSV), relative to the scenario file")
    system: int | str | None = Field(
        None, description="keep only the rows of this System (required if the log has several)"
    )
    start: datetime | None = Field(
        None,
        description="log time that is t = 0, e.g. '6/21/2005 10:54' (default: the first "
        "replayed failure); earlier rows are skipped",
    )
    role: Role = Field("any", description="cluster nodes the log's nodes map onto")
    mapping: Literal["modulo", "first"] = Field(
        "modulo",
        description="modulo: log node n (its nodenum) fails node n mod N of the N nodes of "
        "role; first: node n, and log nodes n >= N are skipped",
    )
    nodes: dict[str, str] | None = Field(
        None,
        description="explicit map from log node id to cluster node, e.g. {17: emb_ps3} "
        "(replaces mapping; unlisted log nodes are skipped)",
    )
    reschedule: Literal["logged", "cluster"] = Field(
        "logged",
        description="logged: a failed node is replaced after its logged repair time "
        "(Prob Fixed - Prob Started); cluster: drawn from cluster.reschedule",
    )
    _entries: list = PrivateAttr(default_factory=list)
    _errors: list = PrivateAttr(default_factory=list)
    _plans: dict = PrivateAttr(default_factory=dict)

    @field_validator("path")
    @classmethod
    def _resolve(cls, value: str, info: ValidationInfo) -> str:
        base = Path((info.context or {}).get("base_dir", "."))
        path = (base / value).resolve()
        if not path.is_file():
            raise ValueError(f"failure log not found: {path}")
        return str(path)

    @field_validator("start", mode="before")
    @classmethod
    def _time(cls, value):
        return failure_log.parse_time(value) if isinstance(value, str) else value

    @field_validator("start")
    @classmethod
    def _local(cls, value):
        if value is not None and value.tzinfo is not None:
            raise ValueError("give a time without a time zone, as the log's times are")
        return value

    @field_validator("nodes", mode="before")
    @classmethod
    def _ids(cls, value):
        if isinstance(value, dict):
            return {failure_log.node_id(k): v for k, v in value.items()}
        return value

    def model_post_init(self, __context) -> None:
        try:
            self._entries = failure_log.read_failure_log(Path(self.path))
        except failure_log.LogError as exc:
            self._errors = [("path", str(exc))]

    def _plan(self, scenario) -> dict:
        """Replayed failures ``(t_s, node, repair_s)`` and the counts of rows skipped."""
        c = scenario.cluster
        key = (c.trainers, c.emb_ps)
        if key in self._plans:
            return self._plans[key]
        entries = self._entries
        systems = sorted({e.system for e in entries}, key=failure_log.id_order)
        if self.system is not None:
            entries = [e for e in entries if e.system == str(self.system).strip()]
        ids = sorted({e.node for e in entries}, key=failure_log.id_order)
        pool = role_range(c.trainers, c.emb_ps, self.role)
        if self.nodes is not None:
            target = {}
            for log_id, name in self.nodes.items():
                with contextlib.suppress(ValueError):  # reported by problems()
                    target[log_id] = parse_node(c.trainers, c.emb_ps, name)
        else:  # log node n: its nodenum if an integer, else its rank among the sorted ids
            index = {i: int(i) if i.isdigit() else k for k, i in enumerate(ids)}
            if self.mapping == "modulo":
                target = {i: pool[n % len(pool)] for i, n in index.items()}
            else:
                target = {i: pool[n] for i, n in index.items() if n < len(pool)}
        mapped = [e for e in entries if e.node in target]
        t0 = self.start or (mapped[0].started if mapped else None)
        kept = [e for e in mapped if e.started >= t0] if t0 else []
        plan = {
            "failures": [
                ((e.started - t0).total_seconds(), target[e.node], e.repair_s) for e in kept
            ],
            "rows": len(self._entries),
            "systems": systems,
            "other_system": len(self._entries) - len(entries),
            "unmapped": len(entries) - len(mapped),
            "unmapped_nodes": len({e.node for e in entries} - set(target)),
            "before_start": len(mapped) - len(kept),
            "t0": t0,
        }
        self._plans[key] = plan
        return plan

    def problems(self, scenario):
        if self._errors:
            return list(self._errors)
        c = scenario.cluster
        found = []
        for log_id, name in (self.nodes or {}).items():
            try:
                parse_node(c.trainers, c.emb_ps, name)
            except ValueError as exc:
                found.append((f"nodes.{log_id}", str(exc)))
        plan = self._plan(scenario)
        systems = plan["systems"]
        if self.system is None and len(systems) > 1:
            found.append(("system", f"the log holds systems {', '.join(systems)}: choose one"))
        elif self.system is not None and plan["other_system"] == plan["rows"]:
            found.append(
                ("system", f"no row of system {self.system} (the log has: {', '.join(systems)})")
            )
        elif not found and not plan["failures"]:
            found.append(("path", f"no failure to replay: {self._counts(plan)}"))
        return found

    @staticmethod
    def _counts(plan: dict) -> str:
        skipped = [
            (plan["other_system"], "of other systems"),
            (plan["unmapped"], f"of {plan['unmapped_nodes']} log nodes mapped to no node"),
            (plan["before_start"], "before start"),
        ]
        parts = [f"{n} {why}" for n, why in skipped if n]
        replayed = f"{plan['rows']} rows, {len(plan['failures'])} replayed"
        return replayed + (f"; skipped: {', '.join(parts)}" if parts else "")

    def note(self, scenario) -> str:
        """What was read and skipped, for the user."""
        plan = self._plan(scenario)
        start = f"; t = 0 is {plan['t0']:%Y-%m-%d %H:%M}" if plan["t0"] else ""
        return f"failure log {Path(self.path).name}: {self._counts(plan)}{start}"

    def rate_per_s(self, scenario):
        failures = self._plan(scenario)["failures"]
        if not failures:
            return 0.0
        return len(failures) / max(scenario.job.work_s, failures[-1][0])

    def expected_failures(self, scenario, horizon_s):
        return sum(time_s <= horizon_s for time_s, _, _ in self._plan(scenario)["failures"])

    def rate_field(self):
        return "path"

    def victims(self, scenario, role):
        failures = self._plan(scenario)["failures"]
        if not failures:
            return 0.0
        wanted = set(role_range(scenario.cluster.trainers, scenario.cluster.emb_ps, role))
        return sum(node in wanted for _, node, _ in failures) / len(failures)

    def events(self, rng, scenario):
        logged = self.reschedule == "logged"
        for time_s, node, repair_s in self._plan(scenario)["failures"]:
            yield Failure(time_s, (node,), self.kind, repair_s if logged else None)


def source_notes(scenario: Scenario) -> list[str]:
    """One line per failure source with something to say (a failure log's rows skipped)."""
    return [
        f"failures.{i}: {source.note(scenario)}"
        for i, source in enumerate(scenario.failures)
        if hasattr(source, "note")
    ]


FailureSourceConfig = Annotated[
    ExponentialFailures
    | WeibullFailures
    | CorrelatedFailures
    | ScheduledFailures
    | TraceFailures
    | FailureLogFailures,
    Field(discriminator="kind"),
]
register_failure_sources(FailureSourceConfig)


def failure_sequence(
    sources: list, streams: list[np.random.Generator], scenario: Scenario
) -> Iterator[Failure]:
    """All sources merged in time order (ties: the earlier source in the file first)."""
    return heapq.merge(
        *(s.events(rng, scenario) for s, rng in zip(sources, streams, strict=True)),
        key=lambda f: f.time_s,
    )


def job_mtbf_s(scenario: Scenario) -> float:
    """Expected time between failures seen by the job, seconds (inf without failures).

    The sources' rates add up; a scheduled or replayed source contributes its count over
    its time window. Used for Young/Daly intervals and CPR's interval choice.
    """
    rate = sum(source.rate_per_s(scenario) for source in scenario.failures)
    return math.inf if rate == 0 else 1 / rate


def victims_per_failure(scenario: Scenario, role: str) -> float:
    """Expected nodes of ``role`` taken by one job failure (rate-weighted over sources)."""
    rates = [source.rate_per_s(scenario) for source in scenario.failures]
    if not sum(rates):
        return 0.0
    taken = [s.victims(scenario, role) for s in scenario.failures]
    return sum(r * v for r, v in zip(rates, taken, strict=True)) / sum(rates)
