"""Warnings about valid scenarios that probably do not say what their author meant.

A scenario without problems may still hold a value that changes nothing: a parameter that
has no effect in its context (a quantization scheme without a bit width), or failures
that come after the training could have ended. Each warning names the field, like an error
(``FILE: dotted.path: warning: what``); the scenario still runs.

:func:`scenario_warnings` lists them; :func:`~ftsim.scenario.loader.validate_scenario`
issues each as a :class:`ScenarioWarning` (Python's ``warnings``: the command line prints
them on standard error, a Python session shows them once each).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Annotated

from pydantic import BaseModel, TypeAdapter
from pydantic_core import PydanticUndefined

from ftsim.scenario.schema import UNLIMITED, Distribution, Operations, Repair, Scenario


class ScenarioWarning(UserWarning):
    """A valid scenario's value that probably does not do what was meant."""

    def __init__(self, file: str, path: str, message: str):
        self.file, self.path, self.message = str(file), path, message
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.file}: {self.path}: warning: {self.message}"


LIFETIME_KINDS = ("exponential", "weibull", "preset")
"""Failure sources whose rate is a node's (``bad_nodes`` changes it)."""

NoEffect = Callable[[BaseModel, Scenario], str | None]
"""Why a field of a section has no effect there (None when it has one)."""

NO_EFFECT: list[tuple[type[BaseModel], str, NoEffect]] = [
    (Distribution, "cv", lambda p, s: None if p.kind == "lognormal" else f"kind is {p.kind}"),
    (
        Distribution,
        "mean",
        lambda p, s: "kind is uniform (low, high)" if p.kind == "uniform" else None,
    ),
    *(
        (Distribution, name, lambda p, s: None if p.kind == "uniform" else f"kind is {p.kind}")
        for name in ("low", "high")
    ),
    (Operations, "swap", lambda p, s: None if p.warm_standbys else "there are no warm_standbys"),
    (
        Operations,
        "host_selection",
        lambda p, s: (
            "spares are unlimited: a fresh one is always taken" if p.spares == UNLIMITED else None
        ),
    ),
    (
        Operations,
        "bad_nodes",
        lambda p, s: (
            None
            if any(f.kind in LIFETIME_KINDS for f in s.failures)
            else f"no failure source has per-node lifetimes ({', '.join(LIFETIME_KINDS)})"
        ),
    ),
    (Repair, "manual", lambda p, s: None if p.escalation else "escalation is 0"),
    *(
        (
            Repair,
            name,
            lambda p, s: (
                None
                if s.cluster.operations.bad_nodes
                else "there are no bad_nodes (a good node is always restored)"
            ),
        )
        for name in ("automatic_miss", "manual_miss")
    ),
]
"""Fields that have no effect in some context, with the reason; a field warns only when the
scenario sets it (a default never warns). The modules defining policy and failure-source
sections add theirs (:func:`register_no_effect`): this package imports neither."""


def register_no_effect(cls: type[BaseModel], name: str, why: NoEffect) -> None:
    """Field ``name`` of section ``cls`` has no effect when ``why(section, scenario)`` says
    why (None: it has one)."""
    NO_EFFECT.append((cls, name, why))


def scenario_warnings(scenario: Scenario) -> list[tuple[str, str]]:
    """(dotted path, message) for every value of ``scenario`` that probably does not do what
    was meant: failures that can only come after the training, fields without effect.

    The values of a scenario with a sweep are a template: a warning inside a section that
    a sweep key changes (``policies.*.log_budget`` changes ``policies.0``) is left out, and
    so are failure warnings when the sweep changes the job or the run (the horizon).
    """
    swept = [key.split(".") for key in _sweep_keys(scenario)]
    return [(path, message) for path, message in _warnings(scenario) if not _excused(path, swept)]


def _sweep_keys(scenario: Scenario) -> list[str]:
    sweep = scenario.sweep
    return [*sweep.grid, *sweep.zip] if sweep is not None else []


def _excused(path: str, swept: list[list[str]]) -> bool:
    """Whether a sweep key changes the section holding ``path`` (or the failures' horizon)."""
    parts = path.split(".")
    for key in swept:
        section = key[:-1]
        if len(section) <= len(parts) and all(
            k in ("*", p) for k, p in zip(section, parts, strict=False)
        ):
            return True
        if parts[0] == "failures" and key[0] in ("job", "run"):
            return True
    return False


def _warnings(scenario: Scenario) -> list[tuple[str, str]]:
    found = []
    for i, source in enumerate(scenario.failures):
        found += [(f"failures.{i}.{path}", message) for path, message in source.warnings(scenario)]
    found += [(path, message) for path, _, _, message in _no_effect(scenario)]
    return list(dict.fromkeys(found))


def _no_effect(scenario: Scenario) -> Iterator[tuple[str, BaseModel, str, str]]:
    """(dotted path, section, field name, message) of each value the scenario gives that
    has no effect where it is."""
    for path, section in _sections(scenario, ""):
        for cls, name, why in NO_EFFECT:
            if isinstance(section, cls) and _set_apart_from_default(section, name):
                reason = why(section, scenario)
                if reason:
                    where = f"{path}.{name}" if path else name
                    yield where, section, name, f"has no effect: {reason}"


def resolved_data(scenario: Scenario) -> dict:
    """The scenario as a run folder's ``scenario.yaml`` holds it and its config hash is
    computed from: every field, defaults filled in, in units, a value that has no effect
    where it is (a ``cv`` of a constant distribution) given as the default instead (not
    inside a section a sweep key changes, where it may have one). Such a value changes no
    result, and reading the file back would warn of it again."""
    data = scenario.model_dump(mode="json")
    swept = [key.split(".") for key in _sweep_keys(scenario)]
    for path, section, name, _ in list(_no_effect(scenario)):
        if _excused(path, swept):
            continue
        default = section.model_copy(update={name: _default(type(section), name)})
        node = data
        for part in path.split(".")[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[name] = default.model_dump(mode="json", include={name})[name]
    return data


def _set_apart_from_default(section: BaseModel, name: str) -> bool:
    """Whether the scenario gives field ``name`` of ``section`` a value of its own: set, not
    null and not the default (a resolved scenario, as saved in a run folder, spells out
    every default)."""
    if name not in section.model_fields_set:
        return False
    value = getattr(section, name)
    return value is not None and value != _default(type(section), name)


@functools.cache
def _default(model: type[BaseModel], name: str):
    """The validated default of field ``name`` of ``model`` (``"10 GB/s"`` as 1e10)."""
    field = model.model_fields[name]
    if field.is_required():
        return PydanticUndefined
    annotated = (
        Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    )
    return TypeAdapter(annotated).validate_python(field.get_default(call_default_factory=True))


def _sections(value, path: str) -> Iterator[tuple[str, BaseModel]]:
    """Every model inside ``value`` (itself included), with its dotted path."""
    if isinstance(value, BaseModel):
        yield path, value
        for name in type(value).model_fields:
            yield from _sections(getattr(value, name), f"{path}.{name}" if path else name)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _sections(item, f"{path}.{i}")
