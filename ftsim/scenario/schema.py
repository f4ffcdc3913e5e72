"""The scenario schema: what a YAML scenario file may say, validated by pydantic.

A scenario has five sections: ``job`` (the model and the work), ``cluster`` (nodes,
network, checkpoint storage, rescheduling), ``failures`` (failure processes), ``policies``
(fault-tolerance strategies to compare, each selected by ``kind`` through the policy
registry) and ``run`` (seed, replications, output). Every model forbids unknown keys.
Quantities carry units (see :mod:`ftsim.scenario.quantities`); inside, all numbers are SI.

``policies:`` and ``failures:`` entries are any kind registered in
:mod:`ftsim.scenario.registry` (``PolicyConfig`` and ``FailureSourceConfig`` below are names
the schema resolves only then): :func:`complete_schema` builds them into :class:`Scenario`
once the modules defining the kinds are imported (:mod:`ftsim.policies.catalog` does both,
for the policy kinds a scenario names). The ``trainer:`` section's model, the embedded
trainer's config, is imported only for a scenario that has one
(:func:`accept_trainer_section`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from pathlib import Path
from statistics import NormalDist
from typing import Annotated, Literal

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from ftsim.scenario import registry
from ftsim.scenario.quantities import BytesPerSecond, Seconds
from ftsim.scenario.units import format_duration

MAX_COUNT = 2**63 - 1
"""Largest count accepted anywhere (a 64-bit integer): ``rows: 1e308`` is a typo, not a model."""

MAX_NODES = 100_000
"""Most trainers, and most embedding PS, a cluster may have (failure draws are per node)."""

MAX_REPLICATIONS = 1_000_000
"""Most replications per policy."""

MIN_TRAINING_S = 1e-6
"""Shortest failure-free training accepted, seconds: the engine counts progress within 1e-9 s
of a target as reaching it (float rounding), so a shorter job would end as it starts, in no
time (a fuzzed ``training: 1e-300 s`` divided by that zero); a microsecond keeps every run
a thousand times above it."""

MAX_TRAINER_VALUES = 2**31
"""Most embedding values of the embedded trainer's model (8 GiB in float32)."""

MAX_EVENTS_PER_REPLICATION = 1_000_000
"""Most events (failures and checkpoints) one replication may be expected to simulate: about
a minute of simulation. Failures are counted up to the horizon where a replication is cut
off (``run.max_wall_factor`` × the failure-free time), checkpoints over the failure-free
time; a scenario above it is refused rather than left running for hours."""


MAX_FAILURES_PER_RESTART = 5.0
"""Most failures expected during one restart (``cluster.reschedule``'s mean over the job's
MTBF) when a replication has more than :data:`MANY_FAILURES`. Beyond it the job hardly ever
trains again (with failures at random, a gap as long as a restart comes once in e^5 ≈ 150
failures), and every failure restarts the recovery of all those not yet recovered: a
replication's cost grows with the square of its failures (a 30 s MTBF with 5 min restarts
and 144,000 failures ran for minutes; 12,000 took 2.7 s). Stated bounds, not measurements."""
MANY_FAILURES = 10_000
"""Failures a replication may have before :data:`MAX_FAILURES_PER_RESTART` applies (a
burst of a few, such as 3 scheduled within a microsecond, costs nothing)."""


def _count(value):
    """Accept ``1e9``-style strings (YAML reads them as text) for large integer counts."""
    if isinstance(value, str):
        try:
            number = float(value.replace("_", ""))
        except ValueError:
            raise ValueError("expected a whole number such as 1000 or 1e9") from None
        if not math.isfinite(number):
            raise ValueError("must be a finite number")
        if number != int(number):
            raise ValueError("expected a whole number")
        value = int(number)
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_COUNT:
        raise ValueError(f"must be at most {MAX_COUNT:.3g}")
    return value


Count = Annotated[int, BeforeValidator(_count)]


class Section(BaseModel):
    """Base of every scenario section: unknown keys are errors; values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class TableGroup(Section):
    """``count`` embedding tables of ``rows`` × ``dim`` values each."""

    name: str = Field("emb", description="label of the group")
    count: Count = Field(1, ge=1, description="number of identical tables in this group")
    rows: Count = Field(ge=1, description="rows per table")
    dim: Count = Field(ge=1, description="values per row (embedding dimension)")


class Job(Section):
    """The model being trained and the amount of work."""

    tables: list[TableGroup] = Field(min_length=1)
    bytes_per_value: Count = Field(4, ge=1, description="bytes per stored value (fp32 = 4)")
    optimizer_slots: Count = Field(
        0, ge=0, description="optimizer values per embedding value (momentum 1, Adam 2)"
    )
    rowwise_optimizer_slots: Count = Field(
        0, ge=0, description="optimizer values per embedding row (row-wise Adagrad 1)"
    )
    dense_params: Count = Field(ge=0, description="dense (MLP) parameter count")
    dense_optimizer_slots: Count = Field(1, ge=0, description="optimizer values per dense value")
    samples_per_iteration: Count = Field(ge=1, description="global batch, samples")
    iteration_time: Seconds | None = Field(None, description="failure-free time per iteration")
    throughput: float | None = Field(
        None, gt=0, description="failure-free samples per second (alternative to iteration_time)"
    )
    training: Seconds | None = Field(None, description="failure-free training time")
    iterations: Count | None = Field(None, ge=1, description="training length in iterations")

    @field_validator("iteration_time", "training")
    @classmethod
    def _positive(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError("must be positive")
        return value

    @model_validator(mode="after")
    def _one_of_each(self):
        if (self.iteration_time is None) == (self.throughput is None):
            raise ValueError("give exactly one of iteration_time and throughput")
        if (self.training is None) == (self.iterations is None):
            raise ValueError("give exactly one of training and iterations")
        if self.work_s < MIN_TRAINING_S:
            raise ValueError(
                f"the failure-free training must last at least {MIN_TRAINING_S:g} s "
                f"(got {self.work_s:.3g} s)"
            )
        if self.n_iterations < 1:  # per-iteration costs (logs, parity) would be of no job
            raise ValueError(
                f"the training, {self.work_s:.3g} s, is shorter than one iteration "
                f"({self.iteration_s:.3g} s): give at least one iteration"
            )
        return self

    @property
    def iteration_s(self) -> float:
        """Failure-free time of one iteration, seconds."""
        if self.iteration_time is not None:
            return self.iteration_time
        return self.samples_per_iteration / self.throughput

    @property
    def work_s(self) -> float:
        """Failure-free compute time of the whole training run, seconds (``ideal``)."""
        if self.training is not None:
            return self.training
        return self.iterations * self.iteration_s

    @property
    def n_iterations(self) -> float:
        return self.work_s / self.iteration_s

    @property
    def embedding_rows(self) -> int:
        return sum(g.count * g.rows for g in self.tables)

    @property
    def embedding_bytes(self) -> float:
        """Embedding values plus their optimizer state, bytes."""
        values = sum(g.count * g.rows * g.dim for g in self.tables)
        per_value = 1 + self.optimizer_slots
        return float(
            (values * per_value + self.embedding_rows * self.rowwise_optimizer_slots)
            * self.bytes_per_value
        )

    @property
    def lookups_per_sample(self) -> int:
        """Embedding lookups one sample makes: one per table."""
        return sum(g.count for g in self.tables)

    @property
    def mean_value_bytes(self) -> float:
        """Bytes of one row's values (what a lookup reads; no optimizer state), averaged."""
        values = sum(g.count * g.rows * g.dim for g in self.tables)
        return values * self.bytes_per_value / self.embedding_rows

    @property
    def mean_row_bytes(self) -> float:
        """Bytes of one embedding row with its optimizer state, averaged over rows."""
        return self.embedding_bytes / self.embedding_rows

    @property
    def dense_bytes(self) -> float:
        """Dense parameters plus their optimizer state, bytes."""
        return float(self.dense_params * (1 + self.dense_optimizer_slots) * self.bytes_per_value)


class Distribution(Section):
    """A non-negative random duration (seconds), e.g. the delay to reschedule a failed node.

    ``constant``: always ``mean``. ``exponential``: mean ``mean``. ``uniform``: on
    [``low``, ``high``]. ``lognormal``: mean ``mean`` and coefficient of variation ``cv``.
    """

    kind: Literal["constant", "exponential", "uniform", "lognormal"] = Field(
        "constant", description="shape of the distribution"
    )
    mean: Seconds | None = Field(None, description="mean (constant, exponential, lognormal)")
    low: Seconds | None = Field(None, description="lower bound (uniform)")
    high: Seconds | None = Field(None, description="upper bound (uniform)")
    cv: float | None = Field(None, gt=0, description="std / mean, for lognormal")

    @model_validator(mode="after")
    def _parameters(self):
        if self.kind == "uniform":
            if self.low is None or self.high is None:
                raise ValueError("uniform needs low and high")
            if self.high < self.low:
                raise ValueError("high must not be below low")
        elif self.mean is None:
            raise ValueError(f"{self.kind} needs mean")
        if self.kind == "lognormal" and self.cv is None:
            raise ValueError("lognormal needs cv")
        return self

    @property
    def expected_s(self) -> float:
        if self.kind == "uniform":
            return (self.low + self.high) / 2
        return self.mean

    def sample(self, rng: np.random.Generator) -> float:
        """One draw, seconds, from one uniform variate (so draws are coupled across
        scenarios by inverse transform); a constant delay draws nothing."""
        if self.kind == "constant":
            return self.mean
        return self.quantile(rng.random())

    def quantile(self, u: float) -> float:
        """The draw for the uniform variate ``u`` in [0, 1), seconds (inverse transform:
        non-decreasing in ``u`` and in every parameter but ``cv``)."""
        if self.kind == "constant":
            return self.mean
        if self.kind == "exponential":
            return -self.mean * math.log1p(-u)
        if self.kind == "uniform":
            return self.low + (self.high - self.low) * u
        sigma = math.sqrt(math.log1p(self.cv**2))
        return self.mean * math.exp(sigma * NormalDist().inv_cdf(u) - sigma**2 / 2)


class Storage(Section):
    """Remote checkpoint storage. A transfer gets min(per-node limit, NIC, fair share of
    the aggregate) bandwidth; concurrent transfers share the aggregate (processor sharing)."""

    write_bandwidth: BytesPerSecond = Field(description="aggregate write bandwidth for this job")
    read_bandwidth: BytesPerSecond = Field(description="aggregate read bandwidth for this job")
    write_bandwidth_per_node: BytesPerSecond | None = Field(
        None, description="per-node write limit (default: the NIC)"
    )
    read_bandwidth_per_node: BytesPerSecond | None = Field(
        None, description="per-node read limit (default: the NIC)"
    )


class Racks(Section):
    """Racks with an oversubscribed uplink. Nodes fill racks of ``size`` in index order
    (trainers first, then embedding PS); traffic between racks, and to and from storage,
    crosses the rack's uplink (one link each way) of capacity size × NIC / oversubscription."""

    size: Count = Field(ge=1, description="nodes per rack")
    oversubscription: float = Field(
        1.0, ge=1, description="sum of the rack's NIC bandwidth over its uplink bandwidth"
    )


class SharePoint(Section):
    """From ``at`` on (wall-clock time since the job started), ``share`` of a link is taken."""

    at: Seconds = Field(description="time from which the share applies")
    share: float = Field(ge=0, lt=1, description="share of the link's capacity taken")


class Background(Section):
    """Traffic that is not a policy's: it takes a share of links before any policy transfer.

    The shares are reserved for the whole run (or follow the time series): policy flows
    share what is left by max-min fairness (see docs/model.md, network model).
    """

    ps_nic_share: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="share of each embedding PS's NIC (send and receive) taken by the job's "
        "own training traffic (row pulls and gradient pushes)",
    )
    storage_share: float | list[SharePoint] = Field(
        0.0,
        description="share of the storage's aggregate read and write bandwidth taken by other "
        "tenants: a constant in [0, 1), or a time series of {at, share} points",
    )

    @field_validator("storage_share")
    @classmethod
    def _storage_share(cls, value):
        if isinstance(value, float | int) and not 0 <= value < 1:
            raise ValueError("must be in [0, 1)")
        if isinstance(value, list):
            if not value:
                raise ValueError("give at least one {at, share} point")
            times = [point.at for point in value]
            if times != sorted(times):
                raise ValueError("points must be in time order")
        return value


UNLIMITED = "unlimited"
"""``operations.spares: unlimited``: a fresh spare node is always free."""


def _spares(value):
    """A whole number of spare nodes (``1e3`` accepted), or ``unlimited``."""
    if value == UNLIMITED:
        return value
    expected = f"expected a whole number of nodes >= 0, or {UNLIMITED}"
    try:
        value = _count(value)
    except ValueError:  # text that is no number: say the word it may be instead
        raise ValueError(expected) from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(expected)
    return value


Spares = Annotated[int | Literal["unlimited"], BeforeValidator(_spares)]


def _after(kind: str, mean: str):
    """A default duration distribution (``kind`` with ``mean``), made fresh per section."""
    return lambda: Distribution(kind=kind, mean=mean)


class Repair(Section):
    """What happens to a failed node once diagnosed: automatic repair, and with probability
    ``escalation`` manual repair after it (automatic repair could not fix it); then the node
    returns to the spare pool. A repair may report success without removing a bad node's
    defect (``automatic_miss``, ``manual_miss``): the node returns still bad. A good node's
    failure is random and every repair restores it. The defaults are AIReSim's illustrative
    values (``airesim/params.py`` at 7b139c7: Table 1 of its paper), not measurements: set
    your cluster's."""

    automatic: Distribution = Field(
        default_factory=_after("exponential", "2 h"),
        description="time of automatic repair (default exponential, mean 2 h: AIReSim's "
        "illustrative auto_repair_time)",
    )
    escalation: float = Field(
        0.8,
        ge=0,
        le=1,
        description="probability that automatic repair cannot fix the node and manual repair "
        "follows (AIReSim's illustrative prob_auto_to_manual)",
    )
    manual: Distribution = Field(
        default_factory=_after("exponential", "2 d"),
        description="time of manual repair, after the automatic one (default exponential, "
        "mean 2 days: AIReSim's illustrative manual_repair_time)",
    )
    automatic_miss: float = Field(
        0.4,
        ge=0,
        le=1,
        description="probability that an automatic repair leaves a bad node bad (AIReSim's "
        "illustrative auto_repair_fail_prob)",
    )
    manual_miss: float = Field(
        0.2,
        ge=0,
        le=1,
        description="probability that a manual repair leaves a bad node bad (AIReSim's "
        "illustrative manual_repair_fail_prob)",
    )


class BadNodes(Section):
    """A share of the nodes fail more often than the others (AIReSim's systematic failures;
    the "lemon nodes" of Kokolis et al., HPCA 2025). Each node of the cluster (in the job,
    a standby or a spare) is bad with probability ``share``, drawn once per replication from
    its own stream, so every policy meets the same bad nodes. A bad node fails ``multiplier``
    times as often as a good one, and a failure source's rate stays the fleet's mean rate r:
    a good node fails at r / (1 − share + share × multiplier). Only sources with per-node
    lifetimes (``exponential``, ``weibull``, ``preset``) depend on the node; given failures
    (``scheduled``, ``trace``, ``failure_log``) and domain failures (``correlated``) do not."""

    share: float = Field(
        ge=0, le=1, description="probability that a node is bad (AIReSim's illustrative: 0.15)"
    )
    multiplier: float = Field(
        ge=1,
        description="a bad node's failure rate over a good node's (AIReSim's illustrative: 6, "
        "systematic failures at 5 × the random rate on top of it)",
    )


class Retirement(Section):
    """Retire a node at its ``failures``-th failure within ``window`` (AIReSim's threshold
    removal): diagnosed, it leaves the cluster for good instead of going to repair, and its
    place in the job is refilled like any failed node's (no node is bought to replace it)."""

    failures: Count = Field(
        ge=1, description="failures within the window that retire a node (the last included)"
    )
    window: Seconds = Field(description="how far back failures count, e.g. '7 d'")

    @field_validator("window")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be positive")
        return value


class Operations(Section):
    """The cluster around the job (off when absent): where a failed node's replacement comes
    from and what happens to the failed node. A failure is diagnosed after ``detection``; the
    failed node goes to repair (or retires) and its place in the job is taken by a warm
    standby (after ``swap``), else a spare from the pool (after ``provisioning``), else by
    the first node back from repair (after ``provisioning``), first come, first served.
    Repaired nodes return to the spare pool. The job resumes ``cluster.reschedule`` after its
    replacements are ready: the rescheduling time emerges from the operations. See
    docs/model.md (cluster operations)."""

    spares: Spares = Field(
        description="spare nodes in the pool at the start (cold: they need provisioning), or "
        "unlimited (a fresh spare is always free)"
    )
    provisioning: Distribution = Field(
        default_factory=_after("constant", "20 min"),
        description="time to bring a spare or repaired node into the job (default 20 min: "
        "AIReSim's illustrative preemption_wait_time)",
    )
    warm_standbys: Count = Field(
        0,
        ge=0,
        le=MAX_NODES,
        description="nodes kept ready beside the job, used before any spare (not refilled)",
    )
    swap: Distribution = Field(
        default_factory=_after("constant", "0 s"),
        description="time to swap a warm standby in (default 0: cluster.reschedule, the "
        "restart, covers it)",
    )
    detection: Distribution = Field(
        default_factory=_after("constant", "0 s"),
        description="time from a failure to its diagnosis, when the node goes to repair and "
        "its replacement is asked for (default 0: a crash; a hang waits for the collective "
        "timeout, 10 min by default in PyTorch)",
    )
    host_selection: Literal["any", "fewest_failures"] = Field(
        "any",
        description="which free node replaces a failed one: any (the one free longest) or "
        "fewest_failures (fewest past failures, then free longest)",
    )
    repair: Repair = Field(default_factory=Repair, description="automatic and manual repair")
    bad_nodes: BadNodes | None = Field(None, description="nodes that fail more often (none)")
    retirement: Retirement | None = Field(None, description="retiring failing nodes (never)")


class Cluster(Section):
    """Nodes, network and storage of the training job."""

    trainers: Count = Field(ge=1, le=MAX_NODES, description="data-parallel MLP trainers")
    emb_ps: Count = Field(ge=1, le=MAX_NODES, description="embedding parameter servers (shards)")
    nic_bandwidth: BytesPerSecond = Field(description="per-node NIC bandwidth")
    network_latency: Seconds = Field(0.0, description="one-way latency added per transfer")
    memory_bandwidth: BytesPerSecond = Field(
        "110 GB/s",
        description="per-node DRAM traffic (reads + writes) of all cores, so a copy moves "
        "bytes at half of it; default: a two-socket AWS server without NUMA-aware code "
        "(docs/calibration.md)",
    )
    storage: Storage
    reschedule: Distribution = Field(
        description="delay until a failed node is replaced; with operations, until the job "
        "restarts once the replacements are ready"
    )
    racks: Racks | None = Field(None, description="racks with oversubscribed uplinks (none: flat)")
    background: Background = Field(
        default_factory=Background, description="traffic of the job itself and other tenants"
    )
    operations: Operations | None = Field(
        None, description="spares, standbys, repair, bad nodes, retirement (none: off)"
    )

    @property
    def n_nodes(self) -> int:
        return self.trainers + self.emb_ps

    @property
    def memory_copy_Bps(self) -> float:
        """Bytes/s a node copies in memory on all its cores: each byte is read and written."""
        return self.memory_bandwidth / 2


class Run(Section):
    """Seed, replications and output location.

    A scenario whose replication is expected to simulate more than 1,000,000 events is
    refused (the message names the field contributing most): failures are counted up to
    the cut-off at ``max_wall_factor`` × the failure-free time, checkpoints (every policy
    field named ``*interval``) over the failure-free time. So is one with more than 10,000
    failures that strike more than 5 times during a restart on average (the job's MTBF
    against ``cluster.reschedule``'s mean): the job would hardly ever train again, and each
    failure restarts the recovery of all those not yet recovered.
    """

    seed: Count = Field(0, ge=0, description="root of every random stream of the run")
    replications: Count = Field(
        1, ge=1, le=MAX_REPLICATIONS, description="independent replications per policy"
    )
    output: str = Field("results", description="folder under which run folders are created")
    max_wall_factor: float = Field(
        100.0,
        gt=1,
        description="stop a replication at this multiple of the failure-free time and report "
        "it as unfinished (left out of the overhead statistics; `run` exits with status 3): "
        "failures can be too frequent to ever finish",
    )


class Sweep(Section):
    """Points of a sweep: ``grid`` is a cartesian product, ``zip`` lists co-vary.

    Keys are dotted paths as for ``--set`` (``policies.*.interval`` sets the interval of
    every selected policy that has one, a composed policy's parts included; see
    :mod:`ftsim.scenario.overrides`); values are lists of what that field accepts. Each
    point is validated as a whole scenario.
    """

    grid: dict[str, list] = Field(
        default_factory=dict, description="dotted key → values; all combinations are run"
    )
    zip: dict[str, list] = Field(
        default_factory=dict, description="dotted key → values; lists of equal length co-vary"
    )
    reference: str | None = Field(
        None, description="policy that paired differences are taken against (default: first)"
    )

    @model_validator(mode="after")
    def _lists(self):
        for name, values in {**self.grid, **self.zip}.items():
            if not values:
                raise ValueError(f"{name}: needs at least one value")
        for name, values in self.grid.items():
            repeated = next((v for i, v in enumerate(values) if v in values[:i]), None)
            if repeated is not None:  # two identical points
                raise ValueError(f"grid {name}: repeats the value {repeated!r}")
        lengths = {len(v) for v in self.zip.values()}
        if len(lengths) > 1:
            each = ", ".join(f"{k}: {len(v)}" for k, v in self.zip.items())
            raise ValueError(f"zip lists must have equal lengths (got {each})")
        return self


class Scenario(Section):
    """A complete scenario: one job on one cluster under failures, several policies."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,100}$", description="names the results folder")
    description: str = Field("", description="free text, kept in the results")
    job: Job = Field(description="the model and the amount of work")
    cluster: Cluster = Field(description="nodes, network, storage, rescheduling")
    failures: list[FailureSourceConfig] = Field(  # noqa: F821 (see complete_schema)
        default_factory=list, description="failure processes, merged (none: no failures)"
    )
    policies: list[PolicyConfig] = Field(  # noqa: F821 (see complete_schema)
        min_length=1, description="fault-tolerance policies to compare, each by kind"
    )
    run: Run = Run()
    sweep: Sweep | None = None
    trainer: TrainerSectionConfig | None = None  # noqa: F821 (see accept_trainer_section)

    @field_validator("name")
    @classmethod
    def _not_dots(cls, name: str) -> str:
        """``.`` or ``..`` named a folder outside ``run.output`` (``output/..``): refused."""
        if not name.strip("."):
            raise ValueError(f"must have a character other than '.' (got {name!r})")
        return name

    def __setstate__(self, state) -> None:
        """Unpickled (a task in a worker, a study saved to disk): the schema accepts the
        scenario's trainer section and policy kinds, as after loading it (the kinds once
        their provider is imported, :mod:`ftsim.policies.catalog`; their modules are, by
        the unpickling), so that the scenario can be dumped and copied."""
        super().__setstate__(state)
        if self.trainer is not None:
            accept_trainer_section()
        if registry.has_policy_kinds_provider():
            registry.require_policy_kinds({policy.kind for policy in self.policies})

    @model_validator(mode="after")
    def _one_shard_per_embedding_ps(self):
        """Fill in ``trainer.sharding.n_shards`` = ``cluster.emb_ps`` when it is left out: the
        co-simulation trains one shard per embedding PS, and the resolved scenario (written to
        every run folder) must say so to load again and reproduce the run."""
        sharding = self.trainer.sharding if self.trainer else None
        if sharding is not None and sharding.n_shards is None:
            shards = sharding.model_copy(update={"n_shards": self.cluster.emb_ps})
            trainer = self.trainer.model_copy(update={"sharding": shards})
            object.__setattr__(self, "trainer", trainer)  # the model is frozen
        return self

    def problems(self) -> list[tuple[str, str]]:
        """Inconsistencies between sections, as (dotted path, message) pairs.

        Non-finite numbers are reported first and alone: the other checks compute with them.
        Policies are checked once the policy names and failure sources are sound (their
        checks plan with the failure rate). A scenario without other problems is checked
        against the event budget, then each policy is planned once (an interval a rule
        resolves to must be within the budget too).
        """
        found = list(_non_finite(self, ""))
        if found:
            return found
        labels = [p.label for p in self.policies]
        for i, label in enumerate(labels):
            if labels.index(label) != i:
                found.append((f"policies.{i}.name", f"duplicate policy name {label!r}"))
        for i, source in enumerate(self.failures):
            found += [(f"failures.{i}.{path}", msg) for path, msg in source.problems(self)]
        if found:  # policies plan with the failure rate: check them once the sources are sound
            return found
        for i, policy in enumerate(self.policies):
            found += [(f"policies.{i}.{path}", msg) for path, msg in policy.problems(self)]
        sharding = self.trainer.sharding if self.trainer else None
        if sharding is not None and sharding.n_shards != self.cluster.emb_ps:
            message = f"must equal cluster.emb_ps ({self.cluster.emb_ps}) or be left out"
            found.append(("trainer.sharding.n_shards", message))
        if self.sweep and self.sweep.reference and self.sweep.reference not in labels:
            found.append(
                (
                    "sweep.reference",
                    f"no policy named {self.sweep.reference!r} (the scenario has: "
                    f"{', '.join(labels)})",
                )
            )
        if self.trainer is not None and self.trainer.enabled:
            found += self._trainer_problems()
        found = found or self._budget_problems()
        for i, policy in enumerate([] if found else self.policies):  # planned: costs bounded
            found += [(f"policies.{i}.{path}", msg) for path, msg in policy.plan_problems(self)]
        return found

    def _trainer_problems(self) -> list[tuple[str, str]]:
        """Trainer data that would fail or exhaust memory only once training starts."""
        data = self.trainer.data
        if data.kind == "criteo" and not Path(data.path).is_file():
            return [("trainer.data.path", f"file not found: {Path(data.path).resolve()}")]
        try:
            sizes = data.table_sizes()
        except ValueError as exc:
            return [("trainer.data.cardinalities", str(exc))]
        values = sum(sizes) * self.trainer.model.embedding_dim
        if values > MAX_TRAINER_VALUES:
            return [
                (
                    "trainer.data",
                    f"the embedded model would hold {values:.3g} embedding values, more than "
                    f"{MAX_TRAINER_VALUES:.3g}: lower row_cap, cardinalities or embedding_dim",
                )
            ]
        return []

    def _budget_problems(self) -> list[tuple[str, str]]:
        """A replication expected to simulate more than ``MAX_EVENTS_PER_REPLICATION`` events,
        reported at the field contributing most (a failure source's rate or an interval);
        or many failures too frequent to restart between (:data:`MAX_FAILURES_PER_RESTART`)."""
        work_s = self.job.work_s
        horizon_s = work_s * self.run.max_wall_factor
        failures = {
            f"failures.{i}.{source.rate_field()}": source.expected_failures(self, horizon_s)
            for i, source in enumerate(self.failures)
        }
        mtbf, restart = job_mtbf_s(self), self.cluster.reschedule.expected_s
        if restart > MAX_FAILURES_PER_RESTART * mtbf and sum(failures.values()) > MANY_FAILURES:
            return [
                (
                    max(failures, key=failures.get),
                    f"a failure every {format_duration(mtbf)} on average (the job's), while a "
                    f"restart takes {format_duration(restart)} (cluster.reschedule): "
                    f"{restart / mtbf:.2g} failures would strike during each, more than "
                    f"{MAX_FAILURES_PER_RESTART:g}, and the job would hardly ever train again; "
                    "make failures rarer or restarts shorter",
                )
            ]
        actions = {i: _checkpoints(policy, self) for i, policy in enumerate(self.policies)}
        busiest = max(actions, key=lambda i: sum(actions[i].values()))
        n_failures, n_actions = sum(failures.values()), sum(actions[busiest].values())
        total = n_failures + n_actions
        if not total > MAX_EVENTS_PER_REPLICATION:
            return []
        causes = failures | {f"policies.{busiest}.{k}": v for k, v in actions[busiest].items()}
        where = max(causes, key=causes.get)
        horizon = format_duration(horizon_s)
        return [
            (
                where,
                f"a replication would simulate about {total:.2g} events ({n_failures:.2g} "
                f"failures up to run.max_wall_factor × the training time = {horizon}, "
                f"{n_actions:.2g} checkpoints of {self.policy_labels[busiest]}), more than "
                f"the limit of {MAX_EVENTS_PER_REPLICATION:,}: make failures rarer or "
                "checkpoints less frequent, or lower job.training or run.max_wall_factor",
            )
        ]

    def trains_model(self, rep: int) -> bool:
        """Whether replication ``rep`` also trains the embedded model (co-simulation)."""
        section = self.trainer
        return section is not None and section.enabled and rep < section.replications

    @property
    def policy_labels(self) -> list[str]:
        return [p.label for p in self.policies]


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


def _checkpoints(policy, scenario: Scenario) -> dict[str, float]:
    """Actions a policy takes in a failure-free run, per field: every policy field named
    ``*interval`` holding a duration is compute time between two of its actions; a target
    portion of lost samples (``target_pls``, or ``target_accuracy_loss`` / ``pls_slope``)
    sets an interval by CPR's rule (1), 2·N·M·PLS/m (N embedding PS, M the job's MTBF, m
    PS lost per failure); a composed policy's parts count as the policy's own."""
    work_s = scenario.job.work_s
    found = {}
    for name in type(policy).model_fields:
        value = getattr(policy, name)
        if name.endswith("interval") and isinstance(value, float) and value > 0:
            found[name] = work_s / value
        elif name in ("target_pls", "target_accuracy_loss") and value is not None:
            target = value if name == "target_pls" else value / policy.pls_slope
            lost = victims_per_failure(scenario, "emb_ps")
            mtbf_s = job_mtbf_s(scenario)
            if lost > 0 and math.isfinite(mtbf_s):
                found[name] = work_s * lost / (2.0 * scenario.cluster.emb_ps * mtbf_s * target)
        elif name == "parts":
            for i, part in enumerate(value):
                inner = _checkpoints(part.policy, scenario)
                found.update({f"parts.{i}.policy.{k}": n for k, n in inner.items()})
    return found


def _non_finite(value, path: str) -> Iterator[tuple[str, str]]:
    """(dotted path, message) for every NaN or infinite float and every integer beyond
    ``MAX_COUNT`` inside ``value`` (a model, list, dict or scalar)."""
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _non_finite(getattr(value, name), f"{path}.{name}" if path else name)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _non_finite(item, f"{path}.{i}")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite(item, f"{path}.{key}")
    elif isinstance(value, float) and not math.isfinite(value):
        yield path, f"must be a finite number (got {value})"
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_COUNT:
        yield path, f"must be at most {MAX_COUNT:.3g}"


_policy_members: tuple[type[BaseModel], ...] = ()
"""The policy kinds' ``Params`` that :class:`Scenario` accepts now (see :func:`complete_schema`)."""

GROWING = threading.RLock()
"""Held while the schema grows: from reading what is registered to the rebuilt
:class:`Scenario` (kinds imported and their union put in place, the trainer section). Threads
that load scenarios naming different kinds at once (a notebook's, a Dask worker's) would
otherwise rebuild with unions read before each other's kinds were registered, and the last
rebuild could drop a kind another thread had just made it accept. (A validation during a
rebuild waits for it: pydantic's own lock.)"""


def complete_schema(policy_params: dict[str, type[BaseModel]]) -> None:
    """Make :class:`Scenario` accept the policy kinds of ``policy_params`` (kind → ``Params``,
    in the order messages list them) and every registered failure source.

    The first call resolves the schema's two unions; a later one with other kinds (a
    scenario naming a kind not imported before) puts the new union in the ``policies``
    field and rebuilds the model (some 2 ms); scenarios validated before stay as they
    are."""
    global _policy_members
    members = tuple(policy_params.values())
    with GROWING:
        if members == _policy_members:
            return
        union = registry.discriminated(policy_params)
        if Scenario.__pydantic_complete__:
            _retype("policies", list[union])
        else:
            failures = registry.discriminated(
                registry.FAILURE_SOURCES, registry.FAILURE_SOURCE_VALIDATORS
            )
            namespace = {
                "PolicyConfig": union,
                "FailureSourceConfig": failures,
                "TrainerSectionConfig": _trainer_section or type(None),
            }
            Scenario.model_rebuild(_types_namespace=namespace)
        _policy_members = members


def accept_named(data) -> None:
    """Make :class:`Scenario` accept what the scenario mapping ``data`` names: its
    ``trainer:`` section (:func:`accept_trainer_section`) and the kinds of its
    ``policies:`` (imported on demand: :func:`ftsim.scenario.registry.require_policy_kinds`).
    Called before anything reads the schema for ``data``: its validation, the renaming of
    old field names, an override's walk down to its field."""
    if isinstance(data, dict) and data.get("trainer") is not None:
        accept_trainer_section()
    registry.require_policy_kinds(_policy_kinds(data))


def _policy_kinds(data) -> set[str]:
    """The ``kind`` of every entry of ``data``'s ``policies:`` (as text: a value that is no
    kind's name makes every kind be imported, for the message that lists them)."""
    entries = data.get("policies") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return set()
    return {str(entry["kind"]) for entry in entries if isinstance(entry, dict) and "kind" in entry}


_trainer_section: type[BaseModel] | None = None
"""The ``trainer:`` section's model once :func:`accept_trainer_section` imported it (until
then :class:`Scenario` accepts no section but ``trainer: null``)."""


def accept_trainer_section() -> None:
    """Make :class:`Scenario` accept a ``trainer:`` section: its model
    (:class:`ftsim.scenario.trainer_section.TrainerSection`, the embedded trainer's config)
    is imported for the scenarios that have one, the loader's first step for them; a
    schema completed before is rebuilt with it (some 2 ms)."""
    global _trainer_section
    if _trainer_section is not None:
        return
    with GROWING:
        if _trainer_section is not None:  # another thread's, while this one waited
            return
        from ftsim.scenario.trainer_section import TrainerSection

        if Scenario.__pydantic_complete__:
            _retype("trainer", TrainerSection | None)
        _trainer_section = TrainerSection  # set last: a thread finding it set goes on at once


def _retype(field: str, annotation) -> None:
    """Give the completed :class:`Scenario`'s ``field`` the type ``annotation`` and rebuild
    the model (pydantic resolves a field's type once: a rebuild alone keeps the old one);
    scenarios validated before stay as they are."""
    Scenario.model_fields[field].annotation = annotation
    Scenario.model_rebuild(force=True)
