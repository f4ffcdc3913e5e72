"""Every policy kind: the module that defines it, and how figures and tables show it (display
name, colour, marker).

This module imports nothing, so figures and tables can name and colour policies without
importing the simulator, and the catalog (:mod:`ftsim.policies.catalog`) can import only
the modules of the kinds a scenario names. The kinds' ``Params`` are registered with the
scenario schema by their modules as they are imported (:func:`ftsim.policies.base.register`).
Adding a policy is its module and its line in :data:`POLICIES`; the order of the lines is
the order in which the schema's messages list the kinds.

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
    module: str
    """The module of :mod:`ftsim.policies` that defines the kind (and registers its
    ``Params``)."""


POLICIES: tuple[PolicyInfo, ...] = (
    PolicyInfo("full", "Full checkpoint", "#000000", "o", "full"),
    PolicyInfo("cpr", "CPR", "#0072B2", "^", "cpr"),
    PolicyInfo("cpr_mfu", "CPR-MFU", "#56B4E9", "v", "cpr"),
    PolicyInfo("cpr_ssu", "CPR-SSU", "#009E73", "D", "cpr"),
    PolicyInfo("ecrm", "ECRM", "#D55E00", "s", "ecrm"),
    PolicyInfo("swift", "SWIFT", "#CC79A7", "P", "swift"),
    PolicyInfo("checknrun", "Check-N-Run", "#E69F00", "h", "checknrun"),
    PolicyInfo("composed", "Composed", "#999999", "X", "composed"),
)

BY_KIND: dict[str, PolicyInfo] = {info.kind: info for info in POLICIES}

_RANK = {kind: i for i, kind in enumerate(BY_KIND)}
"""Each kind's place in :data:`POLICIES`."""


def in_table_order(table: dict[str, object]) -> dict[str, object]:
    """``table`` (by policy kind) in the order of :data:`POLICIES`, then kinds not listed
    there in their own order: the order messages list kinds in, whichever was imported
    first."""
    return dict(sorted(table.items(), key=lambda item: _RANK.get(item[0], len(_RANK))))
