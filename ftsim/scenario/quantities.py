"""Pydantic field types for physical quantities in scenario files.

Each type accepts a string with a unit (``"30 min"``, ``"64 GB"``, ``"25 Gbit/s"``) and
stores plain SI numbers (seconds, bytes, bytes per second). A bare number is refused,
because a number without a unit is exactly the ambiguity that costs researchers days; the
error says which unit to add (zero needs none). A bandwidth must be positive: every
transfer divides by it. When a scenario is printed back (``show config``) the value is
written with a readable unit again.
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer

from ftsim.scenario.units import (
    format_bandwidth,
    format_bytes,
    format_duration,
    parse_bandwidth_Bps,
    parse_bytes,
    parse_duration_s,
)


def _with_unit(parse, example: str, positive: str | None = None):
    """A validator of quantities read by ``parse``; ``positive``: why zero is refused too."""

    def validate(value):
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueError(f"expected a quantity such as {example!r}")
        if isinstance(value, int | float):
            if not math.isfinite(value):  # YAML's .nan or .inf
                what = "is not a number (NaN)" if math.isnan(value) else "is infinite"
                raise ValueError(f"{what}; give a quantity such as {example!r}")
            if value == 0 and positive:
                raise ValueError(f"must be positive: {positive}")
            if value == 0:
                return 0.0
            raise ValueError(f"needs a unit, e.g. {example!r}")
        result = parse(value)
        if result < 0:
            raise ValueError("must not be negative")
        if positive and result == 0:
            raise ValueError(f"must be positive: {positive}")
        return result

    return validate


Seconds = Annotated[
    float,
    BeforeValidator(_with_unit(parse_duration_s, "30 min")),
    PlainSerializer(format_duration, return_type=str),
]
"""A duration, stored in seconds."""

Bytes = Annotated[
    float,
    BeforeValidator(_with_unit(parse_bytes, "64 GB")),
    PlainSerializer(format_bytes, return_type=str),
]
"""A size, stored in bytes."""

BytesPerSecond = Annotated[
    float,
    BeforeValidator(
        _with_unit(parse_bandwidth_Bps, "25 Gbit/s", positive="a zero bandwidth moves nothing")
    ),
    PlainSerializer(format_bandwidth, return_type=str),
]
"""A bandwidth, stored in bytes per second; never zero (every transfer divides by it)."""
