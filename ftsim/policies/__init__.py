"""Fault-tolerance policies, found by ``kind`` through :data:`REGISTRY`.

To add a policy: write one module here with a ``Params`` model (``kind: Literal["mine"]``)
and a :class:`~ftsim.policies.base.Policy` subclass decorated with ``@register``, then add
its import below. The scenario schema picks it up from the registry.
"""

from typing import Annotated, Union

from pydantic import Field

from ftsim.policies import cpr, ecrm, full, swift
from ftsim.policies.base import REGISTRY, Policy, PolicyParams, register

PolicyConfig = Annotated[
    Union[tuple(cls.Params for cls in REGISTRY.values())],  # noqa: UP007
    Field(discriminator="kind"),
]
"""Any registered policy's parameters, selected by ``kind``."""

__all__ = [
    "REGISTRY",
    "Policy",
    "PolicyConfig",
    "PolicyParams",
    "cpr",
    "ecrm",
    "full",
    "register",
    "swift",
]
