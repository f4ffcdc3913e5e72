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
    seconds: bool = False
    """A duration (values in seconds): written with its unit, shown as a duration, its
    column ``<field>_s``. The checkpoint ``interval`` always is; a policy's own duration
    knob must say so (a bare number is refused for a duration: every candidate of a
    two-level policy's ``local_interval`` was)."""

    @property
    def duration(self) -> bool:
        """Whether the values are durations, seconds (:attr:`seconds`, or ``interval``)."""
        return self.seconds or self.field == "interval"

    @property
    def column(self) -> str:
        """The knob's column in the candidates table (with the unit: ``interval_s``)."""
        return f"{self.field}_s" if self.duration else self.field

    def assigned(self, value):
        """The value as the scenario's mapping holds it: a duration with its unit (seconds,
        exactly, as recorded), a number as it is (as text, a choice field such as
        Check-N-Run's ``quantize_bits``, 2, 3, 4 or 8, refused every value: '8' is none)."""
        if value is None:
            return None
        if self.duration:
            return f"{float(value)!r} s"
        return int(value) if self.integer else float(value)

    def show(self, value) -> str:
        """The value for people: ``interval 45.8 min``."""
        if self.duration:
            return f"{self.field} {short_duration(value)}"
        return f"{self.field} {'none' if value is None else f'{value:.3g}'}"
