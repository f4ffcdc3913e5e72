"""Rows an iteration touches: the parameter of policies whose traffic follows the rows each
iteration updates (ECRM's parity updates, SWIFT's update log).

An iteration makes ``samples × lookups per sample`` embedding lookups; popular rows recur
within a batch, so fewer distinct rows are updated, U of them. ``unique_lookup_fraction`` is
U over the lookups: a number (an assumption), or ``zipf``, derived from the job's row
popularity, the Zipf model of CPR-MFU and Check-N-Run (:func:`ftsim.sim.popularity.
row_popularity`: the synthetic trainer data's exponent(s), else ``popularity_exponent``), as
the expected distinct rows among one iteration's lookups of every table
(:func:`ftsim.sim.popularity.distinct_rows`). On prod50h (Zipf 1.05, 20,480 samples, 33 M-row
tables) that is 0.49.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ftsim.policies.base import PolicyParams
from ftsim.sim.popularity import PopularityParams, distinct_rows


class TouchedRowsParams(PolicyParams, PopularityParams):
    """Parameters of a policy whose traffic follows the rows an iteration touches."""

    unique_lookup_fraction: Annotated[float, Field(gt=0, le=1)] | Literal["zipf"] = Field(
        1.0,
        description="touched rows per lookup in an iteration: a number in (0, 1] "
        "(assumption), or zipf (expected distinct rows from the job's row popularity)",
    )

    def popularity_unused(self, scenario) -> str | None:
        if self.unique_lookup_fraction != "zipf":
            return (
                super().popularity_unused(scenario)
                or "unique_lookup_fraction is a number, not zipf"
            )
        return super().popularity_unused(scenario)

    def unique_fraction(self, inputs) -> float:
        """``unique_lookup_fraction`` as a number (derived for ``zipf`` from the
        :class:`~ftsim.policies.inputs.PlanInputs`' job)."""
        if self.unique_lookup_fraction != "zipf":
            return self.unique_lookup_fraction
        groups = inputs.row_popularity(self.popularity_exponent)
        samples = inputs.job.samples_per_iteration
        return distinct_rows(groups, samples) / (samples * inputs.job.lookups_per_sample)

    def touched_rows(self, inputs) -> float:
        """U: distinct rows one iteration updates, all tables together."""
        job = inputs.job
        return job.samples_per_iteration * job.lookups_per_sample * self.unique_fraction(inputs)

    def input_problems(self, inputs):
        found = list(super().input_problems(inputs))
        if self.unique_lookup_fraction == "zipf":
            found += inputs.popularity_problems()
        return found

    def for_part_of(self, inputs) -> TouchedRowsParams:
        """These parameters for a part of the job whose inputs are ``inputs``
        (``composed``): a derived fraction is the whole job's, since a part's rows are not
        Zipf tables of their own."""
        if self.unique_lookup_fraction != "zipf":
            return self
        return self.model_copy(update={"unique_lookup_fraction": self.unique_fraction(inputs)})
