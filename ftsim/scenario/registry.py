"""The kinds a scenario may name: policy kind → its ``Params``, failure-source kind → its
section, filled by the modules that define them.

The schema (:mod:`ftsim.scenario.schema`) validates ``policies:`` and ``failures:`` entries
against what is registered here, so this package never imports the policies or the
simulator: each policy module registers its ``Params`` as it is imported
(:func:`ftsim.policies.base.register`), and :mod:`ftsim.sim.failures` registers its failure
sources. Policy kinds are imported on demand: before it validates a scenario, the loader
asks for the kinds the scenario names (:func:`require_policy_kinds`), and the provider
(:mod:`ftsim.policies.catalog`, which sets itself as it is imported) imports their modules
and completes the schema with them (:func:`ftsim.scenario.schema.complete_schema`).
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Annotated, Union

from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo

POLICY_PARAMS: dict[str, type[BaseModel]] = {}
"""Policy kind → its ``Params`` (a :class:`ftsim.policies.base.PolicyParams`), of the kinds
imported so far, in the order registered (the schema lists them in the order of
:data:`ftsim.policies.registry.POLICIES`)."""

FAILURE_SOURCES: dict[str, type[BaseModel]] = {}
"""Failure-source kind → its section, in the order registered."""

FAILURE_SOURCE_VALIDATORS: list = []
"""Validators that the failure sources' union runs first (e.g. a preset's shorthand)."""

_provider: Callable[[set[str]], None] | None = None


class RegistryError(RuntimeError):
    """A kind registered twice, or asked for with no provider of kinds."""


def kind_of(model: type[BaseModel]) -> str:
    """The ``kind`` literal of a registered section."""
    return typing.get_args(model.model_fields["kind"].annotation)[0]


def register_policy_params(params: type[BaseModel]) -> None:
    """Make ``params`` the section of its policy kind."""
    _add(POLICY_PARAMS, params, "policy")


def register_failure_sources(union) -> None:
    """Register every member of ``union`` (``Annotated[A | B | …, Field(discriminator=…)]``
    or a single section) as a failure source, in order."""
    members = typing.get_args(union)[0] if typing.get_origin(union) is Annotated else union
    for source in typing.get_args(members) or (members,):
        _add(FAILURE_SOURCES, source, "failure source")
    if typing.get_origin(union) is Annotated:  # keep its validators, not its Field
        extra = typing.get_args(union)[1:]
        FAILURE_SOURCE_VALIDATORS.extend(m for m in extra if not isinstance(m, FieldInfo))


def _add(table: dict, model: type[BaseModel], what: str) -> None:
    kind = kind_of(model)
    if table.get(kind, model) is not model:
        raise RegistryError(f"{what} kind {kind!r} registered twice")
    table[kind] = model


def discriminated(table: dict[str, type[BaseModel]], validators=()):
    """Any section of ``table``, selected by ``kind`` (a pydantic discriminated union), after
    ``validators`` (pydantic ``BeforeValidator``s and the like)."""
    if not table:
        raise RegistryError("no kinds registered: import ftsim.policies.catalog first")
    union = Union[tuple(table.values())]  # noqa: UP007
    return Annotated[union, Field(discriminator="kind"), *validators]


def provide_policy_kinds(provider: Callable[[set[str]], None]) -> None:
    """Make ``provider`` what :func:`require_policy_kinds` calls."""
    global _provider
    _provider = provider


def has_policy_kinds_provider() -> bool:
    """Whether a provider of policy kinds is set (:mod:`ftsim.policies.catalog` imported)."""
    return _provider is not None


def require_policy_kinds(kinds: set[str]) -> None:
    """Have the scenario schema accept the policy kinds ``kinds`` (the ``kind`` values of a
    scenario's ``policies:``): the provider imports their modules and completes the
    schema."""
    if _provider is None:
        raise RegistryError("no policy kinds: import ftsim.policies.catalog first")
    _provider(kinds)
