"""Rows an iteration touches: the parameter of policies whose traffic follows the rows each
iteration updates (ECRM's parity updates, SWIFT's update log).

An iteration makes ``samples × lookups per sample`` embedding lookups; popular rows recur
within a batch, so fewer distinct rows are updated, U of them. ``unique_lookup_fraction`` is
U over the lookups: a number (an assumption), or ``zipf``, derived from the job's row
popularity, the Zipf model of CPR-MFU and Check-N-Run (:func:`ftsim.policies.cpr.
row_popularity`: the synthetic trainer data's exponent(s), else ``popularity_exponent``), as
the expected distinct rows among one iteration's lookups of every table
(:func:`ftsim.policies.cpr.distinct_rows`). On prod50h (Zipf 1.05, 20,480 samples, 33 M-row
tables) that is 0.49.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ftsim.policies.base import PolicyParams
from ftsim.policies.cpr import distinct_rows, popularity_problems, row_popularity
from ftsim.trainer.config import MAX_ZIPF_EXPONENT


class TouchedRowsParams(PolicyParams):
    """Parameters of a policy whose traffic follows the rows an iteration touches."""

    unique_lookup_fraction: Annotated[float, Field(gt=0, le=1)] | Literal["zipf"] = Field(
        1.0,
        description="touched rows per lookup in an iteration: a number in (0, 1] "
        "(assumption), or zipf (expected distinct rows from the job's row popularity)",
    )
    popularity_exponent: float = Field(
        1.05,
        ge=0,
        le=MAX_ZIPF_EXPONENT,
        description="Zipf exponent of row popularity if the trainer has no synthetic data "
        "(unique_lookup_fraction: zipf)",
    )

    def unique_fraction(self, scenario) -> float:
        """``unique_lookup_fraction`` as a number (derived for ``zipf``)."""
        if self.unique_lookup_fraction != "zipf":
            return self.unique_lookup_fraction
        groups = row_popularity(scenario, self.popularity_exponent)
        samples = scenario.job.samples_per_iteration
        return distinct_rows(groups, samples) / (samples * scenario.job.lookups_per_sample)

    def touched_rows(self, scenario) -> float:
        """U: distinct rows one iteration updates, all tables together."""
        job = scenario.job
        return job.samples_per_iteration * job.lookups_per_sample * self.unique_fraction(scenario)

    def problems(self, scenario):
        found = list(super().problems(scenario))
        if self.unique_lookup_fraction == "zipf":
            found += popularity_problems(scenario)
        return found

    def for_part_of(self, scenario) -> TouchedRowsParams:
        """These parameters for a part of ``scenario``'s state (``composed``): a derived
        fraction is the whole job's, since a part's rows are not Zipf tables of their own."""
        if self.unique_lookup_fraction != "zipf":
            return self
        return self.model_copy(update={"unique_lookup_fraction": self.unique_fraction(scenario)})
