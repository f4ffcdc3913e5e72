"""The policy kinds, imported on demand: what the scenario schema and the runner need before a
scenario is loaded or a policy run.

A policy module takes 2-6 ms to import (its ``Params`` models, its plan and runtime
classes); a scenario needs only the kinds it names. Importing this module imports no policy
module: it makes :func:`require` what the scenario loader calls before it validates a
scenario (:func:`ftsim.scenario.registry.require_policy_kinds`, with the kinds the scenario
names), and imports the failure sources (:mod:`ftsim.sim.failures`, which register
themselves). :func:`require` imports the kinds' modules (listed in
:mod:`ftsim.policies.registry`), each of which registers its ``Params`` with
:mod:`ftsim.scenario.registry`, and completes the schema with every kind imported so far
(:func:`ftsim.scenario.schema.complete_schema`). Entry points that load scenarios (the CLI,
the experiments, validation) import this module; nothing below them does.
"""

from __future__ import annotations

import importlib

from ftsim.policies.registry import BY_KIND, POLICIES, in_table_order
from ftsim.scenario import registry
from ftsim.scenario.schema import GROWING, complete_schema
from ftsim.sim import failures  # noqa: F401 (registers the failure sources)


def require(kinds: set[str]) -> None:
    """Import the modules of the policy kinds ``kinds`` and complete the scenario schema with
    every kind imported so far. A kind that no module defines (a misspelt one), or no kind
    at all, imports every module: the schema's message then lists every kind."""
    if not kinds or not kinds <= BY_KIND.keys() | registry.POLICY_PARAMS.keys():
        kinds = set(BY_KIND)
    with GROWING:  # the kinds registered and the union made of them, as one step
        for info in POLICIES:
            if info.kind in kinds and info.kind not in registry.POLICY_PARAMS:
                importlib.import_module(f"ftsim.policies.{info.module}")
        complete_schema(in_table_order(registry.POLICY_PARAMS))


def policy_params() -> dict[str, type]:
    """Every policy kind → its ``Params`` (whose ``plan_class`` plans it), in the order of
    :data:`~ftsim.policies.registry.POLICIES`; every module imported and the scenario
    schema completed with every kind (as the scenario reference describes it)."""
    require(set(BY_KIND))
    return in_table_order(registry.POLICY_PARAMS)


registry.provide_policy_kinds(require)
if registry.POLICY_PARAMS:  # kinds imported before (scenarios unpickled): accepted from now on
    require(set(registry.POLICY_PARAMS))
