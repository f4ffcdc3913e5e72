"""Quantities with units at the edges, plain SI numbers inside.

Scenario files may write a duration as ``"30 min"``, a size as ``"64 GB"`` and a bandwidth
as ``"25 Gbit/s"``; the simulator works in seconds, bytes and bytes per second only.
A bare number is taken in the unit named by the field (for example ``interval_h: 0.5``).

Decimal prefixes (k, M, G, T = 10^3…10^12) as network and storage vendors use them; binary
prefixes (KiB, MiB, GiB, TiB) are accepted too.
"""

from __future__ import annotations

import re

SECONDS_PER = {
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "min": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "d": 86400.0,
}
TIME_WORDS = {
    "second": "s",
    "seconds": "s",
    "sec": "s",
    "secs": "s",
    "minute": "min",
    "minutes": "min",
    "mins": "min",
    "hour": "h",
    "hours": "h",
    "hrs": "h",
    "day": "d",
    "days": "d",
}
"""Time units written out, as an engineer types them (``8 hours``), and their symbols."""
BYTES_PER = {
    "B": 1.0,
    "kB": 1e3,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "KiB": 2.0**10,
    "MiB": 2.0**20,
    "GiB": 2.0**30,
    "TiB": 2.0**40,
}
BITS_PER = {"bit": 1.0, "kbit": 1e3, "Mbit": 1e6, "Gbit": 1e9, "Tbit": 1e12}

_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/]*)\s*$")


class UnitError(ValueError):
    """A quantity string that cannot be read, or has a unit of the wrong kind."""


class UnknownUnit(UnitError):
    """A number with a unit that is not one of its kind's (``8 hourz``)."""


def _split(text: str) -> tuple[float, str]:
    match = _QUANTITY.match(text)
    if not match:
        raise UnitError(f"cannot read {text!r} as a number with a unit")
    return float(match.group(1)), match.group(2)


def parse_duration_s(value: float | int | str, default_unit: str = "s") -> float:
    """Duration in seconds; a bare number is in ``default_unit`` (one of ``SECONDS_PER``)."""
    if isinstance(value, bool):
        raise UnitError(f"expected a duration, got {value!r}")
    if isinstance(value, int | float):
        return float(value) * SECONDS_PER[default_unit]
    number, unit = _split(value)
    unit = TIME_WORDS.get(unit, unit or default_unit)
    if unit not in SECONDS_PER:
        raise UnknownUnit(f"unknown time unit {unit!r} (use one of {', '.join(SECONDS_PER)})")
    return number * SECONDS_PER[unit]


def parse_bytes(value: float | int | str, default_unit: str = "B") -> float:
    """Size in bytes; a bare number is in ``default_unit`` (one of ``BYTES_PER``)."""
    if isinstance(value, bool):
        raise UnitError(f"expected a size, got {value!r}")
    if isinstance(value, int | float):
        return float(value) * BYTES_PER[default_unit]
    number, unit = _split(value)
    unit = unit or default_unit
    if unit not in BYTES_PER:
        raise UnitError(f"unknown size unit {unit!r} (use one of {', '.join(BYTES_PER)})")
    return number * BYTES_PER[unit]


def parse_bandwidth_Bps(value: float | int | str, default_unit: str = "GB/s") -> float:
    """Bandwidth in bytes per second.

    Accepts bytes (``"2 GB/s"``, ``"2 GBps"``, ``"2 GB/sec"``) or bits (``"25 Gbit/s"``,
    ``"25 Gb/s"``, ``"25 Gbps"``) per second; a bare number is in ``default_unit``.
    """
    if isinstance(value, bool):
        raise UnitError(f"expected a bandwidth, got {value!r}")
    if isinstance(value, int | float):
        number, unit = float(value), default_unit
    else:
        number, unit = _split(value)
        unit = unit or default_unit
    given = unit  # as written, for the messages
    if unit.endswith("bps"):
        unit = unit[:-3] + "bit/s"
    elif unit.endswith("Bps"):
        unit = unit[:-3] + "B/s"
    base, per, time = unit.rpartition("/")
    if per:  # 'GB/sec' was told it must be per second
        unit = f"{base}/{TIME_WORDS.get(time, time)}"
    if not unit.endswith("/s"):
        raise UnitError(f"bandwidth unit {given!r} must be per second, e.g. 'GB/s' or 'Gbit/s'")
    base = unit[:-2]
    if base in BYTES_PER:
        return number * BYTES_PER[base]
    if base.endswith("b") and base + "it" in BITS_PER:  # 'Gb/s': a lower-case b is a bit
        base += "it"
    if base in BITS_PER:
        return number * BITS_PER[base] / 8.0
    raise UnitError(
        f"unknown bandwidth unit {given!r} (e.g. 'GB/s', 'MB/s', 'Gbit/s', 'Gbps': units are "
        "case-sensitive)"
    )


def format_duration(seconds: float) -> str:
    """Duration in the largest fitting unit, 12 significant digits (``"1.5 h"``, ``"30 min"``).

    Precise enough to read back to the same value for any practical purpose, so the printed
    scenario reproduces the run and hashes stay distinct.
    """
    for unit in ("h", "min", "s", "ms", "us"):
        if seconds >= SECONDS_PER[unit]:
            return f"{seconds / SECONDS_PER[unit]:.12g} {unit}"
    return f"{seconds:.12g} s"


def format_bytes(n_bytes: float) -> str:
    """Size in the largest fitting decimal unit, 12 significant digits (``"64 GB"``)."""
    for unit in ("TB", "GB", "MB", "kB"):
        if n_bytes >= BYTES_PER[unit]:
            return f"{n_bytes / BYTES_PER[unit]:.12g} {unit}"
    return f"{n_bytes:.12g} B"


def format_bandwidth(bytes_per_s: float) -> str:
    """Bandwidth in bytes per second units (``"3.125 GB/s"``)."""
    return format_bytes(bytes_per_s) + "/s"
