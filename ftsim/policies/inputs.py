"""What a policy plans with: :class:`PlanInputs`.

A policy plans once per scenario (:meth:`ftsim.policies.base.PolicyParams.plan`): intervals,
predicted overheads, row-popularity shares, fall-back decisions. It plans with the state it
manages — the job's tables and dense parameters, on the cluster's embedding PS — and the
failures it expects, nothing else of the scenario. The job's inputs come from the scenario
(:meth:`PlanInputs.of`); a part of a ``composed`` policy gets its part's, scaled
(:meth:`PlanInputs.scaled`), so that every policy plans a part exactly as it plans a job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ftsim.scenario.schema import job_mtbf_s, victims_per_failure
from ftsim.sim.cluster import StateLayout
from ftsim.sim.popularity import ZipfGroups, data_exponents, popularity_problems, row_popularity

if TYPE_CHECKING:
    from ftsim.scenario.schema import ClusterParams, JobParams, Scenario

ROLES = ("emb_ps", "trainer")


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """The job and cluster whose state a policy manages, the failures it plans for, and the
    row popularity of the trainer's data."""

    job: JobParams
    cluster: ClusterParams
    mtbf_s: float
    """Expected time between the failures the state sees, s (inf without failures)."""
    victims: dict[str, float]
    """Expected nodes of each role (``emb_ps``, ``trainer``) one failure takes."""
    exponents: float | tuple[float, ...] | None
    """Zipf exponent(s) of the trainer's synthetic data (one per table), None without."""
    layout: StateLayout = field(init=False)
    """Bytes per node and lone-transfer times of this state on this cluster."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "layout", StateLayout(self.job, self.cluster))

    @classmethod
    def of(cls, scenario: Scenario) -> PlanInputs:
        """The whole job's inputs (the failure rate summed over the scenario's sources, the
        victims rate-weighted over them)."""
        return cls(
            scenario.job,
            scenario.cluster,
            job_mtbf_s(scenario),
            {role: victims_per_failure(scenario, role) for role in ROLES},
            data_exponents(scenario),
        )

    def scaled(
        self, job: JobParams, emb_ps: int, mtbf_s: float, victims: dict[str, float]
    ) -> PlanInputs:
        """These inputs for a part of the state: its ``job`` (tables, batch, dense
        parameters of the part), ``emb_ps`` shards, and the failures as it sees them."""
        cluster = self.cluster
        if emb_ps != cluster.emb_ps:
            cluster = cluster.model_copy(update={"emb_ps": emb_ps})
        return PlanInputs(job, cluster, mtbf_s, victims, self.exponents)

    def row_popularity(self, fallback_exponent: float) -> ZipfGroups:
        """The tables by popularity (:func:`~ftsim.sim.popularity.row_popularity`): the
        data's exponent(s), else ``fallback_exponent``."""
        return row_popularity(self.job.tables, self.exponents, fallback_exponent)

    def popularity_problems(self) -> list[tuple[str, str]]:
        """Why the data's exponents cannot be paired with the tables (for the policy's
        ``popularity_exponent``); empty if they can."""
        return popularity_problems(self.exponents, self.job.lookups_per_sample)
