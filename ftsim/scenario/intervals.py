"""The checkpoint interval field: a duration, or the name of an optimum rule that a policy
resolves once it knows the failure rate and its save cost (Young's or Daly's)."""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer

from ftsim.scenario.units import UnitError, UnknownUnit, format_duration, parse_duration_s

INTERVAL_RULES = ("young", "daly")


def _interval(value):
    if isinstance(value, str) and value.strip() in INTERVAL_RULES:
        return value.strip()
    expected = f"expected a duration such as '30 min', or one of {', '.join(INTERVAL_RULES)}"
    if isinstance(value, float) and math.isnan(value):  # YAML's .nan
        raise ValueError(f"is not a number (NaN); {expected}")
    if isinstance(value, float) and math.isinf(value):
        raise ValueError(f"is infinite; {expected}")
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(expected)
    try:
        seconds = parse_duration_s(value)
    except UnknownUnit as exc:  # the units there are first
        raise ValueError(f"{exc}; {expected}") from None
    except UnitError:
        raise ValueError(expected) from None
    if seconds <= 0:
        raise ValueError("must be positive")
    return seconds


Interval = Annotated[
    float | str,
    BeforeValidator(_interval),
    PlainSerializer(lambda v: v if isinstance(v, str) else format_duration(v), return_type=str),
]
"""Checkpoint interval in compute seconds, or the name of an optimum rule."""
