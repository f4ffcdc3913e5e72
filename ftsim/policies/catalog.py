"""Every policy, imported: what the scenario schema and the runner need before a scenario is
loaded or a policy run.

Importing this module imports each policy module (in the order the schema lists the kinds in
its messages), which registers each policy's ``Params`` with :mod:`ftsim.scenario.registry`,
imports the failure sources (:mod:`ftsim.sim.failures`, which register themselves), and then
completes the schema (:func:`ftsim.scenario.schema.complete_schema`). Entry points that load
scenarios (the CLI, the experiments, validation) import it; nothing below them does.
"""

from __future__ import annotations

# the import order is the order the kinds are registered in (and listed in messages)
# isort: off
from ftsim.policies import full, cpr, ecrm, swift, checknrun, composed

# isort: on
from ftsim.scenario.registry import POLICY_PARAMS
from ftsim.scenario.schema import complete_schema
from ftsim.sim import failures  # noqa: F401 (registers the failure sources)

MODULES = (full, cpr, ecrm, swift, checknrun, composed)
"""The policy modules, in the order their kinds are registered."""

complete_schema()


def policy_params() -> dict[str, type]:
    """Every policy kind → its ``Params`` (whose ``plan_class`` plans it)."""
    return dict(POLICY_PARAMS)
