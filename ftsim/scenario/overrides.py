"""Overrides: dotted-key assignments applied to a scenario mapping before it is validated.

``--set``, ``--grid``, a file's ``sweep:`` section and the Python API's ``overrides`` all
go through :func:`assign`, so a key means the same thing everywhere:

- ``a.b.c`` walks mappings; a list entry is addressed by its index in the file
  (``policies.0.interval``; the next free index appends an entry).
- ``*`` addresses every entry of a list, and means *every entry that has the field*:
  ``policies.*.interval`` sets the interval of each selected policy with one and skips the
  others (a policy ``kind`` decides which fields an entry has). A ``composed`` policy has
  the fields of the policies it is made of: a field it lacks itself is set in every part
  whose policy has it (so ``policies.*.interval`` reaches the parts' checkpoint intervals,
  and a swept interval is the interval every policy of the row ran with). The key is an
  error only when no entry has the field.
- ``--policy`` selects policies *before* overrides apply: a wildcard skips the policies not
  selected, and those are dropped before validation (:func:`only_selected`).
- Of a group of exclusive fields (CPR's ``interval`` / ``target_pls`` /
  ``target_accuracy_loss``, Check-N-Run's ``interval`` / ``target_pls``), setting one
  member removes the member the file had: an override replaces the file's choice. Two
  overrides naming different members for one entry contradict each other (an error, as in
  a file), unless one has a wildcard (the later refines) or is null (it clears).
- A field given by its old name (ECRM's and SWIFT's ``checkpoint_interval``, now
  ``interval``) is renamed, with a deprecation notice (:class:`ftsim.notices.RenamedField`).

Each assignment returns the :class:`Target` fields it set, so that a sweep can tell when two
of its keys set the same field (or two members of one exclusive group) of one entry.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import yaml

from ftsim.notices import RenamedField
from ftsim.options import named

MAX_DEPTH = 50
"""Most parts of a dotted key: no scenario field is nested anywhere near as deep."""
MAX_KEY = 500
"""Longest dotted key, characters: no scenario field's path is anywhere near as long."""


@dataclass(frozen=True)
class Target:
    """A field an assignment set: ``where`` is the dotted path of the mapping holding it,
    ``group`` the field with the members of its exclusive group (the field alone if none)."""

    where: str
    field: str
    group: tuple[str, ...]

    def clashes(self, other: Target) -> bool:
        """Whether both set the same choice of one entry (a field, or an exclusive group)."""
        return self.where == other.where and self.group == other.group


def policy_labels(data: dict) -> list[str] | None:
    """Labels (``name``, else ``kind``) of the file's policies; None if it has no list."""
    policies = data.get("policies")
    if not isinstance(policies, list):
        return None
    return [
        str(p.get("name") or p.get("kind")) if isinstance(p, dict) else str(p) for p in policies
    ]


def select(data: dict, names: Sequence[str] | None) -> list[int] | None:
    """Indices of the policies named (``--policy``), in file order; None for all of them.
    ValueError naming the unknown names."""
    if not names:
        return None
    labels = policy_labels(data)
    if labels is None:
        return None  # validation reports the missing list
    unknown = [n for n in names if n not in labels]
    if unknown:
        raise ValueError(
            f"no policy named {', '.join(map(repr, unknown))} in the scenario "
            f"(it has: {', '.join(labels)})"
        )
    return [i for i, label in enumerate(labels) if label in names]


def only_selected(data: dict, selected: Sequence[int] | None) -> dict:
    """``data`` with only the ``selected`` policies (a shallow copy; None keeps all)."""
    if selected is None or not isinstance(data.get("policies"), list):
        return data
    return {**data, "policies": [data["policies"][i] for i in selected]}


def at_file_positions(data: dict, positions: Sequence[int] | None) -> dict:
    """``data`` holding only the selected policies (a sweep folder's scenario.yaml), with
    them put back at their ``positions`` in the file (the other places empty), so that keys
    with file indices (``policies.4.k``) apply as they did; None: all were selected."""
    if positions is None or not isinstance(data.get("policies"), list):
        return data
    policies: list = [{} for _ in range(max(positions, default=-1) + 1)]
    for position, policy in zip(positions, data["policies"], strict=True):
        policies[position] = policy
    return {**data, "policies": policies}


def parse_assignment(assignment: str) -> tuple[str, object]:
    """``dotted.key=value`` → (key, value read as YAML); ValueError naming the problem."""
    from ftsim.scenario.loader import parse_yaml

    key, sep, text = assignment.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--set needs dotted.key=value (got {assignment!r})")
    try:
        value = parse_yaml(text)
    except yaml.YAMLError:
        value = text
    return key.strip(), value


def apply_overrides(
    data: dict, overrides: Sequence[str] | Mapping[str, object], selected=None
) -> list[tuple[str, str]]:
    """Apply ``--set`` assignments (``key=value`` texts) or a mapping of dotted keys to values
    in place; returns their problems as (``--set`` or, from Python, ``overrides``, message)."""
    items = overrides.items() if isinstance(overrides, Mapping) else overrides
    problems, explicit = [], []
    for item in items:
        try:
            key, value = item if isinstance(overrides, Mapping) else parse_assignment(item)
            targets = assign(data, key, value, selected)
            if "*" not in key and value is not None:  # null clears a choice: no contradiction
                _contradiction(key, targets, explicit)
                explicit.append((key, targets))
        except ValueError as exc:
            problems.append((named("overrides"), str(exc)))
    return problems


def _contradiction(key: str, targets: list[Target], earlier: list[tuple[str, list[Target]]]):
    """ValueError if ``key`` sets a member of an exclusive group of an entry another key of
    ``earlier`` set another member of (``policies.1.interval`` and ``policies.1.target_pls``:
    in a file, an error; as overrides the later silently won). Keys with a wildcard refine
    (``policies.*.interval=1h`` then ``policies.1.target_pls=0.01``) and a null clears
    (``policies.1.target_pls=null``): neither is compared."""
    for other, theirs in earlier:
        for mine in targets:
            clash = next((t for t in theirs if t.clashes(mine) and t.field != mine.field), None)
            if clash is not None:
                raise ValueError(
                    f"{other} and {key} both given: {mine.where} takes one of "
                    f"{', '.join(mine.group)}"
                )


def assign(data: dict, key: str, value, selected: Sequence[int] | None = None) -> list[Target]:
    """Set ``value`` at the dotted ``key`` of the scenario mapping ``data`` (module docstring
    for the rules); ``selected``: the policies a wildcard reaches (None: all). Returns the
    fields set; ValueError naming the problem."""
    from ftsim.scenario.schema import Scenario, accept_named, accept_trainer_section

    parts = key.split(".")
    if "" in parts:
        raise ValueError(f"{key}: empty key between dots")
    if len(parts) > MAX_DEPTH:  # a key of 1,000 parts was a RecursionError traceback
        raise ValueError(f"{key[:60]}…: more than {MAX_DEPTH} parts (no field is that deep)")
    if len(key) > MAX_KEY:  # echoed twice, a 100,000-character key made a 200 KB line
        raise ValueError(f"{key[:60]}…: {len(key)} characters (no field path is that long)")
    accept_named(data)  # the walk reads the fields of the sections the data names
    if parts[0] == "trainer":
        accept_trainer_section()
    return _assign(data, Scenario, parts, value, "", selected, lenient=False)


def _assign(node, tp, parts, value, done, selected, lenient) -> list[Target]:
    """Set ``value`` at ``parts`` below ``node`` (of schema type ``tp``, None if unknown).
    ``lenient``: under a wildcard, an entry without the field is skipped (returns [])."""
    from ftsim.scenario.loader import _child_type

    part, rest = parts[0], parts[1:]
    here = _join(done, part)
    if isinstance(node, list):
        item_tp = _child_type(tp, 0) if tp is not None else None
        if part == "*":
            everyone = range(len(node))
            indices = selected if done == "policies" and selected is not None else everyone
            found = []
            for i in indices:
                where = _join(done, str(i))
                if rest:
                    found += _assign(node[i], item_tp, rest, value, where, selected, True)
                else:
                    node[i] = value
                    found.append(Target(done, str(i), (str(i),)))
            if not found and not lenient:
                raise ValueError(_nobody_has(node, indices, item_tp, rest, here))
            return found
        if not (part.isdigit() and int(part) <= len(node)):
            raise ValueError(f"{here}: no list entry {part!r} (the list has {len(node)})")
        if done == "policies" and selected is not None and int(part) not in selected:
            raise ValueError(_not_selected(node, int(part), selected, here))
        if int(part) == len(node):  # the next index appends an entry
            if rest and rest[0] != "kind" and _by_kind(item_tp):
                raise ValueError(
                    f"{here}: a new entry (the list has {len(node)}): give it whole "
                    f"({here}={{kind: …}}) or its kind first ({here}.kind=…)"
                )
            node.append({} if rest else None)
        if not rest:
            node[int(part)] = value
            return [Target(done, part, (part,))]
        return _assign(node[int(part)], item_tp, rest, value, here, selected, lenient)
    if not isinstance(node, dict):
        raise ValueError(f"{here}: cannot set a key inside a {type(node).__name__}")
    model = _model(tp, node)
    if model is not None:
        part = _current_name(model, part, here)
        here = _join(done, part)
        if part not in model.model_fields:
            nested = getattr(model, "nested_policies", None)
            if nested:  # composed: the field of its parts' policies
                found = _assign(node, model, [*nested.split("."), part, *rest], value, done,
                                selected, True)  # fmt: skip
                if found or lenient:
                    return found
            elif lenient:
                return []
    if rest:
        child = node.setdefault(part, {})
        return _assign(child, _child_type(model or tp, part), rest, value, here, selected, lenient)
    node[part] = value
    group = _group(model, part)
    for other in group:
        if other != part:
            node.pop(other, None)
    for old, new in getattr(model, "renamed_fields", {}).items():
        if new in group:
            node.pop(old, None)
    return [Target(done, part, group)]


def _not_selected(policies: list, index: int, selected: Sequence[int], here: str) -> str:
    """Why a key may not set policy ``index``: it is not among the ``selected`` ones, so
    what it set would be dropped (a sweep's points all alike, a value never checked)."""
    labels = policy_labels({"policies": policies}) or []
    label = labels[index] if index < len(labels) else "a new policy"
    chosen = ", ".join(labels[i] for i in selected if i < len(labels))
    return (
        f"{here}: {label} is not among the policies selected ({named('policies')}: {chosen}): "
        "select it too, or leave this key out"
    )


def _join(done: str, part: str) -> str:
    return f"{done}.{part}" if done else part


def _by_kind(tp) -> bool:
    """Whether entries of schema type ``tp`` are a union of sections chosen by ``kind`` (a
    failure source): a new one needs its kind before its other fields. (The policies' type
    is completed later, once the kinds a scenario names are known: not seen here.)"""
    import typing

    from ftsim.scenario.loader import _as_model, _unwrap

    if tp is None or _as_model(tp) is not None:
        return False
    members = [_as_model(m) for m in typing.get_args(_unwrap(tp))]
    return bool(members) and all(m is not None and "kind" in m.model_fields for m in members)


def _model(tp, node: dict):
    """The pydantic model of ``node`` for schema type ``tp``: a union of models is resolved
    by the node's ``kind`` (None when it names no member)."""
    from ftsim.scenario.loader import _as_model, _member_with_kind

    model = _as_model(tp)
    if model is not None or tp is None:
        return model
    kind = node.get("kind")
    return _as_model(_member_with_kind(tp, kind)) if isinstance(kind, str) else None


def _current_name(model, name: str, where: str) -> str:
    """``name``, or the current name of a renamed field (with a deprecation notice)."""
    new = getattr(model, "renamed_fields", {}).get(name)
    if new is None:
        return name
    message = f"{where} is deprecated: call it {new} (the old name still works for now)"
    warnings.warn(message, RenamedField, stacklevel=2)
    return new


def _group(model, field: str) -> tuple[str, ...]:
    """The exclusive group of ``field`` in ``model`` (the field alone if none)."""
    for group in getattr(model, "exclusive_fields", ()):
        if field in group:
            return tuple(group)
    return (field,)


def _nobody_has(node: list, indices, item_tp, rest: list[str], here: str) -> str:
    """Why a wildcard key set nothing: no entry has the field (with the closest name)."""
    names = set().union(*(_field_names(item_tp, node[i]) for i in indices))
    whom = "selected policy" if here == "policies.*" else f"entry of {here[:-2]}"
    from ftsim.scenario.loader import closest_name

    close = closest_name(rest[0], sorted(names))
    hint = f"; did you mean {close!r}?" if close else ""
    return f"{here}.{'.'.join(rest)}: no {whom} has a field {rest[0]!r}{hint}"


def _field_names(tp, node) -> set[str]:
    """Fields of ``node`` (of schema type ``tp``) with old names, and those of the policies
    it is made of (a composed policy's parts)."""
    from ftsim.scenario.loader import _child_type

    model = _model(tp, node) if isinstance(node, dict) else None
    if model is None:
        return set()
    names = set(model.model_fields) | set(getattr(model, "renamed_fields", {}))
    nested = getattr(model, "nested_policies", None)
    if nested:
        level = [(model, node)]
        for key in nested.split("."):
            if key == "*":
                level = [(_child_type(t, 0), x) for t, n in level if isinstance(n, list) for x in n]
            else:
                level = [(_child_type(t, key), n.get(key)) for t, n in level if isinstance(n, dict)]
        for t, n in level:
            names |= _field_names(t, n)
    return names


def rename_deprecated(node, tp=None, where: str = "", source: str = "") -> None:
    """Rename, in place, every field the file gives by an old name (with a notice each)."""
    if tp is None:
        from ftsim.scenario.schema import Scenario, accept_named

        accept_named(node)  # the old names are those of the sections the data names
        tp = Scenario
    from ftsim.scenario.loader import _child_type

    if isinstance(node, list):
        item_tp = _child_type(tp, 0)
        for i, item in enumerate(node):
            rename_deprecated(item, item_tp, _join(where, str(i)), source)
        return
    if not isinstance(node, dict):
        return
    model = _model(tp, node)
    if model is None:
        return
    for old, new in getattr(model, "renamed_fields", {}).items():
        if old in node and new not in node:
            _current_name(model, old, f"{source}{_join(where, old)}")
            node[new] = node.pop(old)
    for key, child in node.items():
        if key in model.model_fields and isinstance(child, dict | list):
            annotation = model.model_fields[key].annotation
            rename_deprecated(child, annotation, _join(where, key), source)
