"""The scenario file reference, generated from the pydantic schema (``ftsim show reference``).

Every section of :class:`ftsim.scenario.schema.Scenario` — including each failure source ``kind``,
each registered policy's ``Params`` and the ``trainer`` section — is listed with every
field: its name, type (quantities with their unit kind, e.g. a duration such as
``'30 min'``), constraints, default and description, all read from the models themselves.
``docs/scenario_reference.md`` is this output; a test regenerates it and compares, so the
document cannot drift from the code.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import sys
import types
import typing
from dataclasses import dataclass

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ftsim.scenario.quantities import Bytes, BytesPerSecond, Seconds
from ftsim.scenario.units import BITS_PER, BYTES_PER, SECONDS_PER, format_bandwidth, format_duration

GENERATED_BY = "python -m ftsim show reference > docs/scenario_reference.md"


@dataclass(frozen=True)
class _Quantity:
    text: str
    format: typing.Callable[[float], str] | None


def _quantities() -> dict[object, _Quantity]:
    """Validator function → how to describe the type and format a default."""
    from ftsim.scenario.intervals import Interval
    from ftsim.scenario.schema import Count
    from ftsim.scenario.units import format_bytes

    kinds = {
        Seconds: _Quantity("duration, e.g. `'30 min'`", format_duration),
        Bytes: _Quantity("size, e.g. `'64 GB'`", format_bytes),
        BytesPerSecond: _Quantity("bandwidth, e.g. `'25 Gbit/s'`", format_bandwidth),
        Interval: _Quantity("duration, e.g. `'30 min'`, or `young` / `daly`", format_duration),
        Count: _Quantity("integer (`1e9` and `1_000` accepted)", None),
    }
    return {typing.get_args(tp)[1].func: quantity for tp, quantity in kinds.items()}


@dataclass(frozen=True)
class _Section:
    path: str
    model: type[BaseModel]
    kind: str | None = None
    """The ``kind`` selecting this model when the field accepts several."""


def _doc(obj) -> str:
    """A docstring as Markdown: reST roles and double backticks become code spans."""
    text = inspect.cleandoc(obj.__doc__ or "") if obj.__doc__ else ""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _members(tp) -> list:
    """Union members (without None), else [tp]; Annotated is stripped."""
    tp = _strip(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [_strip(a) for a in typing.get_args(tp) if a is not type(None)]
    return [tp]


def _strip(tp):
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _is_model(tp) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _kind_of(model: type[BaseModel]) -> str | None:
    field = model.model_fields.get("kind")
    if field is None:
        return None
    values = typing.get_args(field.annotation)
    return values[0] if len(values) == 1 else None


def _submodels(annotation) -> tuple[str, list[type[BaseModel]]]:
    """('', models) for a section field, ('[]', models) for a list of sections."""
    members = _members(annotation)
    if len(members) == 1 and typing.get_origin(members[0]) is list:
        inner = [m for m in _members(typing.get_args(members[0])[0]) if _is_model(m)]
        return "[]", inner
    return "", [m for m in members if _is_model(m)]


def _sections(model: type[BaseModel], path: str = "", seen: dict | None = None) -> list[_Section]:
    """The model and, depth first in field order, every section below it; a section met
    again deeper (a composed policy's parts name the policies) is described once, where
    it is first met (``seen``: section → that path)."""
    seen = {} if seen is None else seen
    seen.setdefault(model, path)
    found = [_Section(path, model)]
    for name, field in model.model_fields.items():
        suffix, models = _submodels(field.annotation)
        child = f"{path}.{name}{suffix}" if path else f"{name}{suffix}"
        for sub in models:
            if sub in seen:
                continue
            kind = _kind_of(sub) if len(models) > 1 or suffix else None
            below = _sections(sub, child, seen)
            found += [_Section(child, sub, kind), *below[1:]]
    return found


@functools.cache
def _homes() -> dict:
    """Section model → the path under which the reference describes it."""
    from ftsim.scenario.schema import Scenario

    homes: dict = {}
    _sections(Scenario, "", homes)
    return homes


def _metadata_text(metadata) -> list[str]:
    out = []
    for item in metadata:
        if isinstance(item, annotated_types.Ge):
            out.append(f"≥ {item.ge}")
        elif isinstance(item, annotated_types.Gt):
            out.append(f"> {item.gt}")
        elif isinstance(item, annotated_types.Le):
            out.append(f"≤ {item.le}")
        elif isinstance(item, annotated_types.Lt):
            out.append(f"< {item.lt}")
        elif isinstance(item, annotated_types.MinLen):
            out.append(f"at least {item.min_length} {_entries(item.min_length)}")
        elif isinstance(item, annotated_types.MaxLen):
            out.append(f"at most {item.max_length} {_entries(item.max_length)}")
        elif getattr(item, "pattern", None):
            out.append(f"matching `{item.pattern}`")
    return out


def _quantity_of(tp, metadata=()) -> _Quantity | None:
    """The quantity type of an annotation (also inside ``Optional``), if any."""
    quantities = _quantities()
    items = list(metadata)
    candidates = [tp]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        candidates = [a for a in typing.get_args(tp) if a is not type(None)]
    for candidate in candidates:
        if typing.get_origin(candidate) is typing.Annotated:
            items += list(candidate.__metadata__)
    for item in items:
        func = getattr(item, "func", None)
        if func in quantities:
            return quantities[func]
    return None


def _type_text(tp, metadata=(), path: str = "") -> str:
    """Readable type of an annotation (quantities by kind, sections by path)."""
    quantity = _quantity_of(tp, metadata)
    if quantity is not None:
        return quantity.text
    members = _members(tp)
    if len(members) > 1:
        models = [m for m in members if _is_model(m)]
        if models and len(models) == len(members):
            kinds = ", ".join(f"`{_kind_of(m)}`" for m in models)
            homes = {_homes().get(m, path) for m in models}
            home = homes.pop() if len(homes) == 1 else path
            return f"section `{home}`, by `kind`: {kinds}"
        texts = [
            _type_text(m, (), path) for m in typing.get_args(_strip(tp)) if m is not type(None)
        ]
        return " or ".join(texts)
    tp = members[0]
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        values = typing.get_args(tp)
        return f"`{values[0]}`" if len(values) == 1 else "one of " + _codes(values)
    if origin is list:
        args = typing.get_args(tp)
        if not args:
            return "list"
        inner = _members(args[0])
        if all(_is_model(m) for m in inner):
            return f"list of sections `{path}`"
        return f"list of {_plural(_type_text(args[0], (), path))}"
    if origin is dict:
        key, value = typing.get_args(tp)
        return f"mapping of {_plural(_type_text(key))} to {_plural(_type_text(value))}"
    if _is_model(tp):
        return f"section `{path}`"
    return {int: "integer", float: "number", str: "text", bool: "`true` / `false`"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def _plural(text: str) -> str:
    return {
        "integer": "integers",
        "number": "numbers",
        "text": "texts",
        "list": "lists",
        "`true` / `false`": "booleans",
    }.get(text, text)


def _default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "**required**"
    factory = field.default_factory
    value = factory() if factory is not None else field.default
    if value is None:
        return "none"
    if isinstance(value, BaseModel):
        given = value.model_dump(mode="json", include=value.model_fields_set)
        if given:  # the default differs from the section's own defaults: say how
            return "`{" + ", ".join(f"{k}: {v}" for k, v in given.items()) + "}`"
        kind = getattr(value, "kind", None)
        return f"`kind: {kind}`, its defaults" if kind else "its defaults"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f"`{value}`" if value else "empty"
    quantity = _quantity_of(field.annotation, field.metadata)
    if quantity is not None and quantity.format is not None and isinstance(value, float):
        return f"`{quantity.format(value)}`"
    if isinstance(value, dict | list):
        return f"`{json.dumps(value)}`"
    return f"`{value!r}`"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def field_type(field: FieldInfo, path: str = "") -> str:
    """A field's type with its unit and bounds, as the reference's type column (Markdown):
    ``duration, e.g. `30 min`, or young / daly``, ``number, > 0, ≤ 1``."""
    text = _type_text(field.annotation, field.metadata, path)
    constraints = _metadata_text(field.metadata)
    return text + (", " + ", ".join(constraints) if constraints else "")


def _field_rows(section: _Section) -> list[str]:
    rows = ["| field | type | default | description |", "|---|---|---|---|"]
    for name, field in section.model.model_fields.items():
        suffix, models = _submodels(field.annotation)
        path = f"{section.path}.{name}{suffix}" if section.path else name + suffix
        text = field_type(field, path)
        if models and not suffix and len(models) == 1:  # described where first met
            text = f"section `{_homes().get(models[0], path)}`"
        cells = [f"`{name}`", text, _default_text(field), field.description or ""]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return rows


def _policy_note(model: type[BaseModel]) -> str:
    cls = getattr(model, "plan_class", None)
    if cls is None:
        return ""
    module = sys.modules[cls.__module__]
    first = _doc(module).split("\n\n")[0].replace("\n", " ")
    runtime = cls.Runtime
    return (
        f"Plan class `{cls.__name__}` (`{cls.__module__}`): {_doc(cls)} Runtime class "
        f"`{runtime.__name__}`: {_doc(runtime)} The module docstring describes the model: "
        f"{first}"
    )


def _heading(section: _Section) -> str:
    if not section.path:
        return "Top level"
    kind = f" with `kind: {section.kind}`" if section.kind else ""
    return f"`{section.path}`{kind}"


def scenario_reference() -> str:
    """The scenario reference, Markdown, ending with a newline (of the kinds the schema
    accepts: :func:`ftsim.policies.catalog.policy_params` first, for every kind)."""
    from ftsim.scenario.registry import RegistryError
    from ftsim.scenario.schema import Scenario, accept_trainer_section

    accept_trainer_section()
    if not Scenario.__pydantic_complete__:
        raise RegistryError(
            "the scenario schema has no kinds yet: call ftsim.policies.catalog.policy_params()"
        )

    sections = _sections(Scenario)
    out = [
        "# Scenario file reference",
        "",
        f"Generated from the schema by `{GENERATED_BY}`; do not edit by hand (a test checks "
        "that this file is up to date).",
        "",
        "A scenario is a YAML file. Unknown keys are errors. Quantities carry units:",
        "",
        f"- **duration**: a number and one of {_units(SECONDS_PER)} (`'30 min'`, `'100 ms'`; "
        "also written out: `seconds`, `minutes`, `hours`, `days`, singular or not, `mins`, "
        "`hrs`);",
        f"- **size**: one of {_units(BYTES_PER)} (`'64 GB'`);",
        "- **bandwidth**: a size or one of "
        f"{_units(BITS_PER)} per second (`'4 GB/s'`, `'25 Gbit/s'`, `'25 Gb/s'`, "
        "`'25 Gbps'`; `/sec` for `/s`).",
        "",
        "A bare number is refused for a quantity (except 0). Any field can be overridden on "
        "the command line by its dotted path, e.g. `--set policies.0.interval='1 h'`; "
        "list entries are addressed by index or `*`. A field whose default is `none` is "
        'optional. Some rules involve several fields (for example "give exactly one of '
        '`iteration_time` and `throughput`"); they are stated in the section texts and '
        "checked when the scenario is loaded.",
        "",
        "Sections:",
        "",
    ]
    out += [f"- {_heading(s)}" for s in sections]
    for section in sections:
        out += ["", f"## {_heading(section)}", ""]
        doc = _doc(section.model)
        if doc:
            out += [doc, ""]
        note = _policy_note(section.model)
        if note:
            out += [note, ""]
        out += _field_rows(section)
    return "\n".join(out) + "\n"


def _units(table: dict) -> str:
    return _codes(table)


def _codes(values) -> str:
    return ", ".join(f"`{v}`" for v in values)


def _entries(n: int) -> str:
    return "entry" if n == 1 else "entries"
