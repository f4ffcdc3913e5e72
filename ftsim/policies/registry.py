"""The policy registry: one line per policy kind, with its module and how figures show it.

This module imports nothing of ftsim, so figures and tables can name and colour policies
without importing the simulator. The runtime classes live in the listed modules, each
decorated with :func:`register`; :func:`policy_classes` imports every listed module (once)
and returns them by kind. Adding a policy is its module plus one line in :data:`POLICIES`.

Colours are Okabe–Ito (colour-blind safe, Okabe & Ito 2008), fixed per kind so that a policy
looks the same in every figure of every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import import_module
from typing import Any


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    """How a policy kind is found and shown."""

    kind: str
    module: str
    """Module that defines and registers the policy's classes."""
    display_name: str
    """Name in figure legends and tables when a policy keeps its default label."""
    color: str
    """Hex colour in figures."""
    marker: str
    """Matplotlib marker in figures."""


POLICIES: tuple[PolicyInfo, ...] = (
    PolicyInfo("full", "ftsim.policies.full", "Full checkpoint", "#000000", "o"),
    PolicyInfo("cpr", "ftsim.policies.cpr", "CPR", "#0072B2", "^"),
    PolicyInfo("cpr_mfu", "ftsim.policies.cpr", "CPR-MFU", "#56B4E9", "v"),
    PolicyInfo("cpr_ssu", "ftsim.policies.cpr", "CPR-SSU", "#009E73", "D"),
    PolicyInfo("ecrm", "ftsim.policies.ecrm", "ECRM", "#D55E00", "s"),
    PolicyInfo("swift", "ftsim.policies.swift", "SWIFT", "#CC79A7", "P"),
    PolicyInfo("checknrun", "ftsim.policies.checknrun", "Check-N-Run", "#E69F00", "h"),
    PolicyInfo("composed", "ftsim.policies.composed", "Composed", "#999999", "X"),
)

BY_KIND: dict[str, PolicyInfo] = {info.kind: info for info in POLICIES}

REGISTRY: dict[str, Any] = {}
"""Policy kind → runtime class (a :class:`ftsim.policies.base.Policy` subclass), filled by
:func:`register` as the policy modules are imported."""


def register(cls):
    """Class decorator: make a policy available under its ``Params.kind``."""
    kind = cls.Params.model_fields["kind"].annotation.__args__[0]
    if kind in REGISTRY:
        raise ValueError(f"policy kind {kind!r} registered twice")
    REGISTRY[kind] = cls
    return cls


def policy_classes() -> dict[str, Any]:
    """Every registered policy class by kind, after importing each module of :data:`POLICIES`."""
    _import_policies()
    return REGISTRY


@cache
def _import_policies() -> None:
    """Import every module of :data:`POLICIES` (once: a simulation asks at every start)."""
    for module in dict.fromkeys(info.module for info in POLICIES):
        import_module(module)
