"""What ``ftsim advise`` may search of a policy: a :class:`Knob` is one of its fields with
coarse values to try and how to refine between them. A policy's ``Params`` lists its own
(:attr:`~ftsim.policies.base.PolicyParams.search`); the checkpoint ``interval`` is searched
for every policy that has one (:func:`ftsim.experiments.advise.knobs`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ftsim.notices import short_duration


@dataclass(frozen=True)
class Knob:
    """A policy field searched: its coarse values and how to refine between them."""

    field: str
    """The field's dotted key below the policy (``interval``)."""
    values: tuple
    """Coarse values (SI numbers; None for an option such as no quantization)."""
    refine: str | None = None
    """``geometric`` or ``linear`` midpoints between tried values; None: a fixed choice."""
    integer: bool = False
    lowest: float = 0.0
    highest: float = math.inf
    """Bounds of the values tried beyond the coarse grid."""

    @property
    def column(self) -> str:
        """The knob's column in the candidates table (with the unit: ``interval_s``)."""
        return "interval_s" if self.field == "interval" else self.field

    def assigned(self, value):
        """The value as the scenario's mapping holds it: an interval with its unit (seconds,
        exactly, as recorded), a number as it is (as text, a choice field such as
        Check-N-Run's ``quantize_bits``, 2, 3, 4 or 8, refused every value: '8' is none)."""
        if value is None:
            return None
        if self.field == "interval":
            return f"{float(value)!r} s"
        return int(value) if self.integer else float(value)

    def show(self, value) -> str:
        """The value for people: ``interval 45.8 min``."""
        if self.field == "interval":
            return f"interval {short_duration(value)}"
        return f"{self.field} {'none' if value is None else f'{value:.3g}'}"
