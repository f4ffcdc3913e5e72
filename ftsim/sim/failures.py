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
- ``preset`` (or just ``preset: NAME``): a published failure rate with its source
  (:mod:`ftsim.sim.presets`), expanded into one ``exponential`` source per cause.
- ``failure_log``: replay of a public failure log (LANL's failure data: node, failure
  start, repair end), its nodes mapped onto the cluster's, its repair times as the
  rescheduling delays (:mod:`ftsim.sim.failure_log`).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import heapq
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
)

from ftsim.notices import counted
from ftsim.scenario.files import TextFileError, read_text
from ftsim.scenario.notices import register_no_effect
from ftsim.scenario.quantities import Seconds
from ftsim.scenario.registry import register_failure_sources
from ftsim.scenario.schema import job_mtbf_s, victims_per_failure  # noqa: F401 (re-exported)
from ftsim.scenario.units import format_duration
from ftsim.sim import failure_log, presets
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

    def warnings(self, scenario: Scenario) -> list[tuple[str, str]]:
        """What is valid but probably not meant (failures that can never strike), as
        (field, message); asked once the scenario has no problems."""
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

    def input_file(self) -> Path | None:
        """The file this source replays (a trace, a failure log), None for a random one."""
        return None


def _roles_meet(a: str, b: str) -> bool:
    """Whether sources of roles ``a`` and ``b`` can strike the same node."""
    return "any" in (a, b) or a == b


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
            given = "neither" if self.node_mtbf is None else "both"
            return [
                (
                    "node_mtbf",
                    f"give exactly one of node_mtbf and job_mtbf (got {given}; an override "
                    "that gives one sets the other to null, e.g. job_mtbf=null)",
                )
            ]
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
        return self.job_mtbf * len(self.node_range(scenario))

    def node_range(self, scenario) -> range:
        """Global indices of the nodes that fail."""
        return role_range(scenario.cluster.trainers, scenario.cluster.emb_ps, self.role)

    def rate_per_s(self, scenario):
        return len(self.node_range(scenario)) / self.mean_lifetime_s(scenario)

    def victims(self, scenario, role):
        return _share_of_role(scenario, self.node_range(scenario), role)

    def _standard_lifetimes(
        self, rng: np.random.Generator, shape: tuple[int, int], first: bool
    ) -> np.ndarray:
        """Lifetimes of unit mean, a row per node; with ``first``, the block that starts at
        t = 0, whose first column is what is left of each node's lifetime then."""
        raise NotImplementedError

    def lifetime_block(
        self, rng: np.random.Generator, scenario: Scenario, first: bool = False
    ) -> np.ndarray:
        """The next lifetimes of every node (a row of ``_BLOCK`` per node of
        :meth:`node_range`), seconds, in the order :meth:`events` draws them; ``first``:
        the first block, from t = 0."""
        shape = (len(self.node_range(scenario)), _BLOCK)
        return self._standard_lifetimes(rng, shape, first) * self.mean_lifetime_s(scenario)

    def events(self, rng, scenario):
        nodes = np.asarray(self.node_range(scenario))
        clock = np.zeros(len(nodes))
        carry_t, carry_node = np.empty(0), np.empty(0, dtype=int)
        first = True
        while True:
            lifetimes = self.lifetime_block(rng, scenario, first)
            first = False
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

    def _standard_lifetimes(self, rng, shape, first):
        return rng.standard_exponential(shape)  # memoryless: what is left is the same


MIN_WEIBULL_SHAPE = 0.01
"""Smallest Weibull shape accepted. Fitted HPC node lifetimes have k of about 0.7–0.8
(Schroeder & Gibson, DSN 2006); the unit-mean scale 1/Γ(1 + 1/k) overflows a float below
k ≈ 0.006."""


class WeibullFailures(_LifetimeSource):
    """Weibull node lifetimes with ``shape`` k (k < 1: infant mortality) and mean MTBF.

    ``start: equilibrium`` (default): the nodes have run long before the job, so each one's
    first failure comes after the rest of a lifetime in progress (the forward recurrence
    time of a stationary renewal process: density (1 − F(x)) / MTBF, which for Weibull
    lifetimes of scale λ is λ · G^(1/k) with G ~ Gamma(1/k)); the job then sees nodes /
    node_mtbf failures per unit time from its start, as the MTBF says and the planning of
    intervals assumes. ``start: new``: every node is new at t = 0; with k < 1 the job sees
    more failures early (a new user's 0.7, job_mtbf 5 h, 38 nodes: 18.9 in 50 h, not 10),
    which the planning of intervals (Daly's, CPR's) does not foresee. With cluster
    operations, a failure of another source replaces a host too, and its Weibull lifetime
    starts anew: with k < 1 new hosts fail early, and the source fails more often than its
    MTBF says (said as a warning)."""

    kind: Literal["weibull"]
    shape: float = Field(ge=MIN_WEIBULL_SHAPE, description="Weibull shape k")
    start: Literal["equilibrium", "new"] = Field(
        "equilibrium",
        description="equilibrium: the nodes ran long before the job (its failure rate is "
        "nodes / node_mtbf from the start); new: every node is new at t = 0 (k < 1: more "
        "failures early than the MTBF says)",
    )

    def warnings(self, scenario):
        """Under cluster operations, other sources that strike this one's nodes: each of
        their failures puts a new host in, whose lifetime starts anew (shape 0.5 and an
        exponential source at the same rate: 0.57 failures per hour where the MTBF says 0.4;
        the fidelity audit)."""
        if scenario.cluster.operations is None or self.shape == 1:
            return []
        others = [
            i
            for i, source in enumerate(scenario.failures)
            if source is not self and _roles_meet(getattr(source, "role", "any"), self.role)
        ]
        if not others:
            return []
        more = "more" if self.shape < 1 else "less"
        early = "early" if self.shape < 1 else "late"
        named = ", ".join(f"failures.{i}" for i in others)
        return [
            (
                "shape",
                f"with cluster.operations, failures of {named} replace this source's hosts and "
                f"their Weibull lifetimes start anew (shape {self.shape:g}: new hosts fail "
                f"{early}): it fails {more} often than its MTBF says, which the planning of "
                "intervals assumes",
            )
        ]

    def _standard_lifetimes(self, rng, shape, first):
        k = self.shape
        scale = 1 / math.gamma(1 + 1 / k)  # unit mean
        lifetimes = rng.weibull(k, shape) * scale
        if first and self.start == "equilibrium":  # what is left of each node's lifetime
            lifetimes[:, 0] = scale * rng.standard_gamma(1 / k, shape[0]) ** (1 / k)
        return lifetimes


class CorrelatedFailures(_Source):
    """Failure domains: ``domain_size`` consecutive nodes of ``role`` share a fate. The last
    domain is shorter when the role's nodes are not a multiple of ``domain_size``; it fails
    as often as the others, and planning takes the mean nodes a failure takes over the
    domains."""

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
            found.append(
                (
                    "domain_size",
                    f"larger than the {n} nodes of role {self.role} (got {self.domain_size})",
                )
            )
        if self.nodes_per_failure and self.nodes_per_failure > self.domain_size:
            found.append(
                (
                    "nodes_per_failure",
                    f"cannot exceed domain_size {self.domain_size} (got {self.nodes_per_failure})",
                )
            )
        if self.domain_mtbf <= 0:
            found.append(("domain_mtbf", "must be positive"))
        return found

    def _pool(self, scenario) -> range:
        return role_range(scenario.cluster.trainers, scenario.cluster.emb_ps, self.role)

    def rate_field(self):
        return "domain_mtbf"

    def rate_per_s(self, scenario):
        return len(self._domains(scenario)) / self.domain_mtbf

    def _domains(self, scenario) -> list[range]:
        """The domains: consecutive runs of ``domain_size`` nodes, the last one shorter
        when the role's nodes are not a multiple of it."""
        nodes = self._pool(scenario)
        return [nodes[i : i + self.domain_size] for i in range(0, len(nodes), self.domain_size)]

    def _taken(self, domain: range) -> int:
        """Nodes a failure of ``domain`` takes."""
        return min(self.nodes_per_failure or len(domain), len(domain))

    def victims(self, scenario, role):
        """The mean over the domains (each fails at the same rate) of the nodes of ``role``
        a failure takes: 6 PS in domains of 4 lose 3 on average, not 4 (a shorter last
        domain loses at most its size; CPR planned on 4)."""
        domains = self._domains(scenario)
        taken = [self._taken(d) * _share_of_role(scenario, d, role) for d in domains]
        return sum(taken) / len(domains)

    def events(self, rng, scenario):
        domains = self._domains(scenario)
        mean_gap_s = self.domain_mtbf / len(domains)
        t = 0.0
        while True:
            gaps = rng.standard_exponential(_BLOCK) * mean_gap_s
            picks = rng.integers(0, len(domains), _BLOCK)
            for gap, pick in zip(gaps, picks, strict=True):
                t += float(gap)
                domain = domains[int(pick)]
                victims = rng.choice(len(domain), self._taken(domain), replace=False)
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
        "uniform", description="uniform: random times; even: (end - start)/(count+1) apart"
    )

    def problems(self, scenario):
        c = scenario.cluster
        found = []
        if (self.times is None) == (self.count is None):
            found.append(("times", "give exactly one of times and count"))
        if self.nodes is not None:
            if self.times is None or len(self.nodes) != len(self.times):
                times = counted(0 if self.times is None else len(self.times), "time")
                lists = counted(len(self.nodes), "list")
                per_time = f"needs one list of victims per entry of times ({times}, got {lists})"
                found.append(("nodes", per_time))
            for i, victims in enumerate(self.nodes):
                if not victims:
                    found.append((f"nodes.{i}", "a failure needs at least one victim (got [])"))
                seen: dict[int, int] = {}  # node → the first entry naming it
                for j, name in enumerate(victims):
                    try:
                        node = parse_node(c.trainers, c.emb_ps, name)
                    except ValueError as exc:
                        found.append((f"nodes.{i}.{j}", str(exc)))
                        continue
                    if node in seen:
                        again = f"{name} is already a victim (nodes.{i}.{seen[node]})"
                        found.append((f"nodes.{i}.{j}", again))
                    seen.setdefault(node, j)
        n = len(role_range(c.trainers, c.emb_ps, self.role))
        if self.nodes_per_failure > n:
            found.append(
                (
                    "nodes_per_failure",
                    f"exceeds the {n} nodes of role {self.role} (got {self.nodes_per_failure})",
                )
            )
        end = self.end if self.end is not None else scenario.job.work_s
        if end <= self.start:
            found.append(("end", "must be after start"))
        return found

    def warnings(self, scenario):
        if self.times is not None:
            late = _late(scenario, self.times)
            if late:
                first, why = late
                return [(f"times.{first}", f"{format_duration(self.times[first])} is {why}")]
        elif self.end is not None and self.end > scenario.job.work_s:
            why = _after_training(scenario, self.end, cut_off=False)
            return [("end", f"{format_duration(self.end)} (failures are drawn up to it) is {why}")]
        return []

    def rate_per_s(self, scenario):
        """``count`` over its window; given ``times``, over the training time (``start`` and
        ``end`` are the window of ``count`` failures: they have no effect on given times)."""
        if self.times is not None:
            return len(self.times) / scenario.job.work_s
        end = self.end if self.end is not None else scenario.job.work_s
        return self.count / (end - self.start)

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
        else:  # as Python floats (the same values): sorted and yielded without conversion
            times = (self.start + (end - self.start) * rng.random(self.count)).tolist()
        kind, size, per_failure = self.kind, len(pool), self.nodes_per_failure
        for i in sorted(range(len(times)), key=times.__getitem__):
            if self.nodes is not None:
                victims = tuple(sorted(parse_node(c.trainers, c.emb_ps, n) for n in self.nodes[i]))
            else:
                picks = rng.choice(size, per_failure, replace=False).tolist()
                victims = tuple(sorted([pool[p] for p in picks]))
            yield Failure(float(times[i]), victims, kind)


def user_file(value: str, info: ValidationInfo, what: str) -> Path:
    """The absolute path of the file ``value`` (relative to the scenario file); ValueError
    saying ``what`` is missing, a folder or not a regular file."""
    path = Path((info.context or {}).get("base_dir", ".")) / value
    try:
        path = path.resolve()
        if not path.exists():
            raise ValueError(f"{what} not found: {path}")
        if path.is_dir():
            raise ValueError(f"{what} is a folder, not a file: {path}")
        if not path.is_file():
            raise ValueError(f"{what} is not a regular file (a device, FIFO or socket): {path}")
    except (OSError, RuntimeError) as exc:  # a name too long, a symlink loop
        raise ValueError(
            f"{what} cannot be read: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    return path


def _after_training(scenario: Scenario, time_s: float, cut_off: bool = True) -> str | None:
    """Why a failure at ``time_s`` (wall seconds) is doubtful, or None when it comes within
    the failure-free training time: ``after ...`` the training, or (``cut_off``) after the
    cut-off of a replication."""
    work_s = scenario.job.work_s
    horizon_s = work_s * scenario.run.max_wall_factor
    if cut_off and time_s > horizon_s:
        return (
            f"after the cut-off at run.max_wall_factor × the training time "
            f"({format_duration(horizon_s)}): never simulated"
        )
    if time_s > work_s:
        return (
            f"after the failure-free training time ({format_duration(work_s)}): a failure "
            "after it strikes only if earlier ones delay the job that long"
        )
    return None


def _late(scenario: Scenario, times_s: list[float]) -> tuple[int, str] | None:
    """(index of the first, what) of the ``times_s`` after the training, or None."""
    late = [i for i, t in enumerate(times_s) if t > scenario.job.work_s]
    if not late:
        return None
    first = late[0]
    why = _after_training(scenario, times_s[first])
    if len(late) > 1:
        why += f" ({len(late)} of {len(times_s)} are after the training time)"
    return first, why


_TIME_COLUMNS = {"time_s": 1.0, "time_min": 60.0, "time_h": 3600.0}

MAX_TRACE_ROWS = 1_000_000
"""Most failures a trace may list (a replication simulates each one)."""


class TraceFailures(_Source):
    """Replay of a failure trace CSV (path relative to the scenario file).

    Rows must be in time order, with finite, non-negative times: a NaN or negative time is
    a broken trace, not a failure at time 0. A trace with a header only replays no failure
    (with a warning): a quiet period is a valid scenario.
    """

    kind: Literal["trace"]
    file: str = Field(
        description="CSV path, relative to the scenario file: a header of one time column "
        "(time_s, time_min or time_h) and one victim column (node: a node such as emb_ps3; "
        "or role: trainer, emb_ps or any, a random node of it), one failure per row, in "
        "time order"
    )
    _rows: list[tuple[float, str, str]] = PrivateAttr(default_factory=list)

    @field_validator("file")
    @classmethod
    def _resolve(cls, value: str, info: ValidationInfo) -> str:
        """The absolute path of a readable, well-formed trace."""
        path = user_file(value, info, "trace file")
        _read_trace(path)
        return str(path)

    def model_post_init(self, __context) -> None:
        self._rows = _read_trace(Path(self.file))

    def input_file(self) -> Path:
        return Path(self.file)

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

    def warnings(self, scenario):
        if not self._rows:
            return [("file", "the trace lists no failures (only a header): none are replayed")]
        late = _late(scenario, [time_s for time_s, _, _ in self._rows])
        if not late:
            return []
        first, why = late
        line = f"{Path(self.file).name} line {first + 2}"
        return [("file", f"{line}, at {format_duration(self._rows[first][0])}, is {why}")]

    def rate_per_s(self, scenario):
        if not self._rows:
            return 0.0
        return len(self._rows) / max(scenario.job.work_s, self._rows[-1][0])

    def expected_failures(self, scenario, horizon_s):
        return len(self._rows)

    def rate_field(self):
        return "file"

    def victims(self, scenario, role):
        c = scenario.cluster
        wanted = set(role_range(c.trainers, c.emb_ps, role))
        if not self._rows:
            return 0.0
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


def _repeats(repeats: list[tuple[int, int]]) -> str:
    """``line 6 repeats line 2, …; the first is kept`` (three of them at most)."""
    said = ", ".join(f"line {line} repeats line {first}" for line, first in repeats[:3])
    return said + (", …" if len(repeats) > 3 else "") + "; the first is kept"


def _log_node_numbers(ids: list[str]) -> dict[str, int]:
    """Log node numbers (``mapping``): an integer id is its own number; the other ids, in
    sorted order, are numbered on from the largest integer id (from 0 without one), so that
    ``login-a`` never takes node 1's number in a log that has both."""
    integers = [int(i) for i in ids if failure_log.is_integer_id(i)]
    after = max(integers) + 1 if integers else 0
    texts = sorted((i for i in ids if not failure_log.is_integer_id(i)), key=failure_log.id_order)
    return {str(n): n for n in integers} | {t: after + k for k, t in enumerate(texts)}


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
    ``System``; see `ftsim/sim/failure_log.py`). Log node n (its ``nodenum``; node ids
    that are not integers are numbered on from the log's largest integer id, in sorted
    order, so that no two log nodes share a number) maps onto node
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
        "replayed failure); earlier rows are skipped; with a time zone (converted to UTC) "
        "when the log's times have one",
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
        return str(user_file(value, info, "failure log"))

    @field_validator("start", mode="before")
    @classmethod
    def _time(cls, value):
        return failure_log.parse_time(value) if isinstance(value, str) else value

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

    def input_file(self) -> Path:
        return Path(self.path)

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
        else:  # log node n: its nodenum if an integer, else numbered on after them
            index = _log_node_numbers(ids)
            if self.mapping == "modulo":
                target = {i: pool[n % len(pool)] for i, n in index.items()}
            else:
                target = {i: pool[n] for i, n in index.items() if n < len(pool)}
        mapped = [e for e in entries if e.node in target]
        t0 = failure_log.as_utc(self.start) if self.start else None
        t0 = t0 or (mapped[0].started if mapped else None)
        kept = [e for e in mapped if e.started >= t0] if t0 else []
        first_of: dict[tuple, int] = {}  # (node, started) → the line that first has it
        repeats = [e for e in kept if first_of.setdefault((e.node, e.started), e.line) != e.line]
        kept = [e for e in kept if first_of[e.node, e.started] == e.line]
        plan = {
            "failures": [
                ((e.started - t0).total_seconds(), target[e.node], e.repair_s) for e in kept
            ],
            "rows": len(self._entries),
            "systems": systems,
            "other_system": len(self._entries) - len(entries),
            "unmapped": len(entries) - len(mapped),
            "unmapped_nodes": len({e.node for e in entries} - set(target)),
            "before_start": len(mapped) - len(kept) - len(repeats),
            "repeats": [(e.line, first_of[e.node, e.started]) for e in repeats],
            "system": self.system,
            "unknown_ids": sorted(set(self.nodes or {}) - {e.node for e in entries},
                                  key=failure_log.id_order),
            "t0": t0,
        }  # fmt: skip
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
        elif self.system is not None and plan["rows"] and plan["other_system"] == plan["rows"]:
            named = [x for x in systems if x]  # a log without the column: system ''
            has = f"the log has: {', '.join(named)}" if named else "the log has no System column"
            found.append(("system", f"no row of system {self.system} ({has})"))
        zoned = bool(self._entries) and self._entries[0].zoned
        if self.start is not None and self._entries and (self.start.tzinfo is not None) != zoned:
            if zoned:
                message = "has no time zone but the log's times have one: give one (e.g. +00:00)"
            else:
                message = "has a time zone but the log's times have none: leave it out"
            found.append(("start", message))
        return found

    def warnings(self, scenario):
        plan = self._plan(scenario)
        if not plan["rows"]:
            return [("path", "the log has no rows (only a header): no failure is replayed")]
        if not plan["failures"]:
            return [("path", f"no failure to replay: {self._counts(plan)}")]
        return []

    @staticmethod
    def _counts(plan: dict, scenario: Scenario | None = None) -> str:
        work_s = scenario.job.work_s if scenario is not None else math.inf
        late = sum(time_s > work_s for time_s, _, _ in plan["failures"])
        repeats = plan["repeats"]
        unmapped = counted(plan["unmapped_nodes"], "log node")
        skipped = [
            (plan["other_system"], "of other systems"),
            (plan["unmapped"], f"of {unmapped} mapped to no node"),
            (plan["before_start"], "before start"),
            (len(repeats), f"repeating an earlier row's node and start ({_repeats(repeats)})"),
        ]
        parts = [f"{counted(n, 'row')} {why}" for n, why in skipped if n]
        replayed = f"{counted(plan['rows'], 'row')}, {len(plan['failures'])} replayed"
        if late:
            replayed += f" ({late} after the training time, {format_duration(work_s)})"
        said = replayed + (f"; skipped: {', '.join(parts)}" if parts else "")
        unknown = plan["unknown_ids"]
        if unknown:
            nodes = "node" if len(unknown) == 1 else "nodes"  # no count: the ids follow
            rows = "" if plan["system"] is None else f" in system {plan['system']}"
            said += f"; nodes: the log has no {nodes} {', '.join(unknown)}{rows}"
        return said

    def note(self, scenario) -> str:
        """What was read and skipped, for the user (a log usually runs on past the job's
        training time: said here, not warned about)."""
        plan = self._plan(scenario)
        start = f"; t = 0 is {plan['t0']:%Y-%m-%d %H:%M}" if plan["t0"] else ""
        return f"failure log {Path(self.path).name}: {self._counts(plan, scenario)}{start}"

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


class PresetFailures(_Source):
    """A published failure rate (``preset``), expanded into one ``exponential`` source per
    cause; see :mod:`ftsim.sim.presets` for how the rate maps onto the cluster's nodes and
    ``python -m ftsim show presets`` for the sources. ``kind: preset`` may be left out:
    ``failures: [{preset: llama3_405b}]``."""

    kind: Literal["preset"]
    preset: Literal[tuple(presets.PRESETS)] = Field(
        description="name of the preset (python -m ftsim show presets)"
    )
    role: Role = Field("any", description="nodes the preset applies to: trainer, emb_ps or any")
    gpus_per_node: int | None = Field(
        None,
        ge=1,
        description="GPUs one node of role stands for (default: the measured node's); "
        "the rate scales with it",
    )
    scale: float = Field(1.0, gt=0, description="multiplies every rate (sensitivity)")

    @property
    def spec(self) -> presets.Preset:
        return presets.PRESETS[self.preset]

    def node_rate_per_s(self) -> float:
        """Failures per second of one node of ``role``, all causes."""
        spec = self.spec
        gpus = self.gpus_per_node or spec.gpus_per_node
        return spec.rate_per_node_day * gpus / spec.gpus_per_node * self.scale / presets.DAY_S

    def sources(self) -> list[tuple[str, ExponentialFailures]]:
        """(cause label, source) per cause: the expansion into existing kinds."""
        rate = self.node_rate_per_s()
        return [
            (
                f"{self.preset}: {cause}",
                ExponentialFailures.model_construct(  # SI seconds, already validated
                    kind="exponential", role=self.role, node_mtbf=1 / (rate * p), job_mtbf=None
                ),
            )
            for cause, p in self.spec.shares()
        ]

    def rate_field(self):
        return "preset"

    def rate_per_s(self, scenario):
        c = scenario.cluster
        return len(role_range(c.trainers, c.emb_ps, self.role)) * self.node_rate_per_s()

    def victims(self, scenario, role):
        c = scenario.cluster
        return _share_of_role(scenario, role_range(c.trainers, c.emb_ps, self.role), role)

    def events(self, rng, scenario):
        """The causes' sources merged in time order, each from its own child stream, each
        failure labelled with its cause."""
        parts = self.sources()
        streams = rng.spawn(len(parts))
        labelled = [
            _labelled(label, source.events(child, scenario))
            for (label, source), child in zip(parts, streams, strict=True)
        ]
        yield from heapq.merge(*labelled, key=lambda f: f.time_s)


def lifetime_parts(
    source: _Source, rng: np.random.Generator
) -> list[tuple[str, _LifetimeSource, np.random.Generator]] | None:
    """The per-node lifetime processes of ``source``, each with its label and stream: the
    source itself (``exponential``, ``weibull``), or one per cause of a ``preset`` on the
    child streams its :meth:`~PresetFailures.events` draws from; None for given failures
    (``scheduled``, ``trace``, ``failure_log``) and domain failures (``correlated``), which
    do not depend on the node. Cluster operations redraw these processes node by node, each
    replacement starting a fresh lifetime (:mod:`ftsim.sim.operations`)."""
    if isinstance(source, _LifetimeSource):
        return [(source.kind, source, rng)]
    if isinstance(source, PresetFailures):
        parts = source.sources()
        streams = rng.spawn(len(parts))
        return [(label, part, child) for (label, part), child in zip(parts, streams, strict=True)]
    return None


def _labelled(label: str, failures: Iterator[Failure]) -> Iterator[Failure]:
    """``failures`` with ``source`` set to ``label`` (a preset's cause)."""
    for failure in failures:
        yield dataclasses.replace(failure, source=label)


def preset_shorthand(value):
    """``{preset: NAME, ...}`` without a ``kind`` is a preset source (``kind: preset``)."""
    if isinstance(value, dict) and "preset" in value and "kind" not in value:
        return {"kind": "preset", **value}
    return value


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
    | FailureLogFailures
    | PresetFailures,
    Field(discriminator="kind"),
    BeforeValidator(preset_shorthand),
]
register_failure_sources(FailureSourceConfig)
for _name in ("spacing", "start", "end"):
    register_no_effect(
        ScheduledFailures,
        _name,
        lambda p, s: "times are given" if p.times is not None else None,
    )
for _name in ("role", "nodes_per_failure"):
    register_no_effect(
        ScheduledFailures,
        _name,
        lambda p, s: "nodes names the victims" if p.nodes is not None else None,
    )
for _name in ("mapping", "role"):
    register_no_effect(
        FailureLogFailures, _name, lambda p, s: "nodes maps the log's nodes" if p.nodes else None
    )


def failure_sequence(
    sources: list, streams: list[np.random.Generator], scenario: Scenario
) -> Iterator[Failure]:
    """All sources merged in time order (ties: the earlier source in the file first)."""
    if len(sources) == 1:  # one source is its own order: no merge needed
        return sources[0].events(streams[0], scenario)
    return heapq.merge(
        *(s.events(rng, scenario) for s, rng in zip(sources, streams, strict=True)),
        key=_time_of,
    )


def _time_of(failure: Failure) -> float:
    return failure.time_s


class FailureDraws:
    """The failures of replication ``rep``, each with its rescheduling delay: drawn as far as
    a simulation asks (sources may be endless) and kept, so that the policies simulated on
    one replication read one draw instead of repeating it (they see the same failures by
    construction: common random numbers). Delays come from their own stream
    (:attr:`~ftsim.sim.rng.Purpose.RESCHEDULE`), one draw per failure in time order, so the
    stream stays aligned however far a run goes; a source that knows a failure's delay (a
    failure log's repair time) keeps it."""

    def __init__(self, scenario: Scenario, rep: int):
        from ftsim.sim.operations import operations_for
        from ftsim.sim.rng import LazyStream, Purpose, stream

        seed = scenario.run.seed
        sources = scenario.failures
        streams = [stream(seed, rep, Purpose.FAILURES, i) for i in range(len(sources))]
        self.operations = operations_for(scenario, rep, streams)
        """The cluster's operations pass (None without ``cluster.operations``): it draws the
        failures host by host and sets each one's ``reschedule_s``."""
        if self.operations is None:
            self._sequence = failure_sequence(sources, streams, scenario)
        else:
            self._sequence = self.operations.failures()
        self._reschedule = scenario.cluster.reschedule
        self._rng = LazyStream(seed, rep, Purpose.RESCHEDULE)
        self.drawn: list[Failure] = []
        """The failures drawn so far, in time order, with their delays."""

    def get(self, index: int) -> Failure | None:
        """Failure number ``index`` (0: the first), drawn if need be; None after the last."""
        drawn = self.drawn
        while len(drawn) <= index:
            failure = next(self._sequence, None)
            if failure is None:
                return None
            delay = self._reschedule.sample(self._rng)  # drawn for every failure
            if failure.reschedule_s is None:
                failure = Failure(failure.time_s, failure.nodes, failure.source, delay)
            drawn.append(failure)
        return drawn[index]
