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

from collections.abc import Callable, Iterator

from pydantic import BaseModel

from ftsim.policies.checknrun import CheckNRunParams
from ftsim.policies.composed import ComposedParams
from ftsim.policies.cpr import CprParams
from ftsim.policies.saving import SavingParams
from ftsim.policies.swift import SwiftParams
from ftsim.policies.touched import TouchedRowsParams
from ftsim.scenario.schema import Distribution, Scenario
from ftsim.sim.failures import FailureLogFailures, ScheduledFailures


class ScenarioWarning(UserWarning):
    """A valid scenario's value that probably does not do what was meant."""

    def __init__(self, file: str, path: str, message: str):
        self.file, self.path, self.message = str(file), path, message
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.file}: {self.path}: warning: {self.message}"


def _synthetic_popularity(scenario: Scenario) -> bool:
    data = scenario.trainer.data if scenario.trainer is not None else None
    return data is not None and data.kind == "synthetic"


def _popularity(params, scenario: Scenario) -> str | None:
    if _synthetic_popularity(scenario):
        return "the trainer's synthetic data sets the row popularity (trainer.data.zipf_exponent)"
    if isinstance(params, TouchedRowsParams) and params.unique_lookup_fraction != "zipf":
        return "unique_lookup_fraction is a number, not zipf"
    if isinstance(params, ComposedParams) and not params.by_rows:
        return "the parts split the state by shards, not by row popularity (hottest)"
    return None


NoEffect = Callable[[BaseModel, Scenario], str | None]
"""Why a field of a section has no effect there (None when it has one)."""

NO_EFFECT: list[tuple[type[BaseModel], str, NoEffect]] = [
    (
        CheckNRunParams,
        "quantization",
        lambda p, s: "quantize_bits is null (no quantization)" if p.quantize_bits is None else None,
    ),
    (CheckNRunParams, "popularity_exponent", _popularity),
    (CprParams, "popularity_exponent", _popularity),
    (TouchedRowsParams, "popularity_exponent", _popularity),
    (ComposedParams, "popularity_exponent", _popularity),
    (
        CprParams,
        "pls_slope",
        lambda p, s: None if p.target_accuracy_loss is not None else "no target_accuracy_loss",
    ),
    *(
        (
            SavingParams,
            name,
            lambda p, s: "save_mode is sync (no snapshot)" if p.save_mode == "sync" else None,
        )
        for name in ("snapshot_bandwidth", "persist_slowdown")
    ),
    (
        SwiftParams,
        "unlogged",
        lambda p, s: "log_budget is 1: every update is logged" if p.log_budget >= 1 else None,
    ),
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
    *(
        (ScheduledFailures, name, lambda p, s: "times are given" if p.times is not None else None)
        for name in ("spacing", "start", "end")
    ),
    *(
        (
            ScheduledFailures,
            name,
            lambda p, s: "nodes names the victims" if p.nodes is not None else None,
        )
        for name in ("role", "nodes_per_failure")
    ),
    *(
        (FailureLogFailures, name, lambda p, s: "nodes maps the log's nodes" if p.nodes else None)
        for name in ("mapping", "role")
    ),
]
"""Fields that have no effect in some context, with the reason; a field warns only when the
scenario sets it (a default never warns)."""


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
    for path, section in _sections(scenario, ""):
        for cls, name, why in NO_EFFECT:
            if isinstance(section, cls) and name in section.model_fields_set:
                reason = why(section, scenario)
                if reason:
                    found.append((f"{path}.{name}" if path else name, f"has no effect: {reason}"))
    return list(dict.fromkeys(found))


def _sections(value, path: str) -> Iterator[tuple[str, BaseModel]]:
    """Every model inside ``value`` (itself included), with its dotted path."""
    if isinstance(value, BaseModel):
        yield path, value
        for name in type(value).model_fields:
            yield from _sections(getattr(value, name), f"{path}.{name}" if path else name)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _sections(item, f"{path}.{i}")
