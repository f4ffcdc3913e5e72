"""How figures and tables show each policy kind: its display name, colour and marker.

This module imports nothing, so figures and tables can name and colour policies without
importing the simulator. The kinds themselves (kind → ``Params``) are registered with the
scenario schema by the policy modules (:func:`ftsim.policies.base.register`), which
:mod:`ftsim.policies.catalog` imports. Adding a policy is its module, its line in the
catalog and its line in :data:`POLICIES`.

Colours are Okabe–Ito (colour-blind safe, Okabe & Ito 2008), fixed per kind so that a policy
looks the same in every figure of every run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    """How a policy kind is shown."""

    kind: str
    display_name: str
    """Name in figure legends and tables when a policy keeps its default label."""
    color: str
    """Hex colour in figures."""
    marker: str
    """Matplotlib marker in figures."""


POLICIES: tuple[PolicyInfo, ...] = (
    PolicyInfo("full", "Full checkpoint", "#000000", "o"),
    PolicyInfo("cpr", "CPR", "#0072B2", "^"),
    PolicyInfo("cpr_mfu", "CPR-MFU", "#56B4E9", "v"),
    PolicyInfo("cpr_ssu", "CPR-SSU", "#009E73", "D"),
    PolicyInfo("ecrm", "ECRM", "#D55E00", "s"),
    PolicyInfo("swift", "SWIFT", "#CC79A7", "P"),
    PolicyInfo("checknrun", "Check-N-Run", "#E69F00", "h"),
    PolicyInfo("composed", "Composed", "#999999", "X"),
)

BY_KIND: dict[str, PolicyInfo] = {info.kind: info for info in POLICIES}
