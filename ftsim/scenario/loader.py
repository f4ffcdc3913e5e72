"""Loading scenario files: YAML → overrides → validated :class:`~ftsim.scenario.schema.Scenario`.

Every problem is reported as ``FILE: dotted.path: what is wrong (got X)``, all of them at
once, as a :class:`ScenarioError`; the command line prints them and exits with status 2.
An unknown key gets the closest valid key as a suggestion.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import math
import types
import typing
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from ftsim.options import named
from ftsim.scenario import overrides as rules
from ftsim.scenario.files import TextFileError, read_text
from ftsim.scenario.schema import Scenario, accept_named


class ScenarioError(Exception):
    """An invalid scenario: a list of (dotted path, message) problems in one file."""

    def __init__(self, file: str | Path, problems: list[tuple[str, str]]):
        self.file = str(file)
        self.problems = problems
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(
            f"{self.file}: {path or '(top level)'}: {msg}" for path, msg in self.problems
        )


def read_yaml(path: Path) -> dict:
    """The scenario file as a mapping; ScenarioError if missing, unreadable or not YAML."""
    try:
        text = read_text(path, MAX_SCENARIO_BYTES)
    except TextFileError as exc:
        raise ScenarioError(path, [("", str(exc))]) from None
    try:
        data = parse_yaml(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(path, [(getattr(exc, "key_path", ""), _yaml_problem(exc))]) from None
    if not isinstance(data, dict):
        raise ScenarioError(
            path, [("", f"a scenario must be a mapping of sections (got {_show(data)})")]
        )
    return data


MAX_YAML_DEPTH = 50
"""Deepest nesting of YAML collections accepted (a scenario needs about 6)."""

MAX_YAML_NODES = 100_000
"""Most values a YAML document may stand for once its aliases are expanded (a scenario has
a few hundred). Anchors and aliases are allowed, but not a "billion laughs" document whose
few lines expand to billions of values."""


MAX_SCENARIO_BYTES = 2**20
"""Largest scenario file read (1 MiB; a scenario has a few kB): PyYAML reads about a
megabyte per second."""


class _ScenarioYamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing duplicate keys and too deep nesting."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def fetch_flow_collection_start(self, TokenClass):
        # Checked while scanning: the scanner's cost per token grows with the flow depth,
        # so ``[[[[…`` would take quadratic time before the composer ever sees it.
        if self.flow_level >= MAX_YAML_DEPTH:
            raise yaml.scanner.ScannerError(
                None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", self.get_mark()
            )
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"nested deeper than {MAX_YAML_DEPTH} levels",
                    self.peek_event().start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node, deep=False):
        # PyYAML's scalar constructors call int(), float() and date() directly, so a value
        # such as ``!!int abc``, a 5000-digit integer or ``2020-13-45`` raises ValueError.
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:
            reason = str(exc).split(";")[0]  # no advice about sys.set_int_max_str_digits
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {_show(str(node.value))} ({reason})", node.start_mark
            ) from None

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            _refuse_duplicate_keys(node)
        return super().construct_mapping(node, deep=deep)


def _refuse_duplicate_keys(node: yaml.MappingNode) -> None:
    """ConstructorError at the second occurrence of a plain scalar key of ``node``."""
    first_line: dict[str, int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = key_node.value
        if key in first_line:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {key!r} (first at line {first_line[key]})",
                key_node.start_mark,
            )
        first_line[key] = key_node.start_mark.line + 1


def _expanded_shape(node: yaml.Node, shapes: dict, depth: int = 1) -> tuple[int, int]:
    """(values, levels) that ``node`` stands for with aliases expanded.

    ComposerError when an alias refers to a collection containing it, or when aliases nest
    deeper than ``MAX_YAML_DEPTH`` at ``depth``. ``shapes`` memoizes by node identity (None
    while being counted), so the cost is linear in the document, not in its expansion.
    """
    key = id(node)
    if key not in shapes:
        if depth > MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"aliases nest deeper than {MAX_YAML_DEPTH} levels", node.start_mark
            )
        shapes[key] = None
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        else:
            children = []
        inner = [_expanded_shape(child, shapes, depth + 1) for child in children]
        shapes[key] = (1 + sum(s for s, _ in inner), 1 + max((h for _, h in inner), default=0))
    if shapes[key] is None:
        raise yaml.composer.ComposerError(
            None, None, "an alias refers to a collection containing it", node.start_mark
        )
    if depth - 1 + shapes[key][1] > MAX_YAML_DEPTH:
        raise yaml.composer.ComposerError(
            None, None, f"aliases nest deeper than {MAX_YAML_DEPTH} levels", node.start_mark
        )
    return shapes[key]


def parse_yaml(text: str):
    """One YAML document as Python data, with the limits above (yaml.YAMLError otherwise)."""
    loader = _ScenarioYamlLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        shapes: dict = {}
        size, _ = _expanded_shape(node, shapes)
        if size > MAX_YAML_NODES:
            keys, node = _largest_key(node, shapes)
            error = yaml.composer.ComposerError(
                None,
                None,
                f"aliases expand to {shapes[id(node)][0]:.3g} values, more than {MAX_YAML_NODES:,}",
                node.start_mark,
            )
            error.key_path = ".".join(keys)
            raise error
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _largest_key(node: yaml.Node, shapes: dict) -> tuple[list[str], yaml.Node]:
    """The dotted key path (and value node) where an alias-expansion bomb sits: from the top,
    the key of the largest value while that value alone expands beyond ``MAX_YAML_NODES``."""
    keys = []
    while isinstance(node, yaml.MappingNode):
        pairs = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode)]
        if not pairs:
            break
        key, value = max(pairs, key=lambda pair: shapes[id(pair[1])][0])
        if shapes[id(value)][0] <= MAX_YAML_NODES:
            break
        keys.append(key.value)
        node = value
    return keys, node


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error as one line: ``invalid YAML at line L, column C: problem``."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    return f"invalid YAML{where}: {f'{context}, ' if context else ''}{problem}"


def set_path(data: dict, parts: list[str], value) -> None:
    """Set ``value`` at the dotted path ``parts`` of the scenario mapping ``data``, by the
    rules of :func:`ftsim.scenario.overrides.assign` (ValueError naming the problem)."""
    rules.assign(data, ".".join(parts), value)


Overrides = Sequence[str] | Mapping[str, object]
"""``--set`` texts (``dotted.key=value``, the value read as YAML) or a mapping of dotted
keys to values (the Python API)."""


def read_scenario(
    path: str | Path, overrides: Overrides = (), policies: Sequence[str] | None = None
) -> tuple[dict, list[int] | None]:
    """The scenario file as a mapping, old field names renamed, with the overrides applied
    to the ``policies`` selected by label (None: all; :mod:`ftsim.scenario.overrides`), and
    the indices of the selected policies (None: all). ScenarioError lists every problem."""
    path = Path(path)
    return override_scenario(read_yaml(path), path, overrides, policies)


def override_scenario(
    data: dict, path: Path, overrides: Overrides = (), policies: Sequence[str] | None = None
) -> tuple[dict, list[int] | None]:
    """:func:`read_scenario` on a mapping already read (from ``path``, or a loaded
    scenario's dump, reported as ``path``)."""
    rules.rename_deprecated(data, source=f"{path}: ")
    try:
        selected = rules.select(data, policies)
    except ValueError as exc:
        raise ScenarioError(path, [(named("policies"), str(exc))]) from None
    problems = rules.apply_overrides(data, overrides, selected)
    if problems:
        raise ScenarioError(path, problems)
    return data, selected


def load_scenario(
    path: str | Path, overrides: Overrides = (), policies: Sequence[str] | None = None
) -> Scenario:
    """Read, select ``policies`` (by label; None: all), override and validate a scenario
    file; ScenarioError lists every problem. A ``sweep.reference`` naming a policy left out
    is dropped (a run does not use it)."""
    path = Path(path)
    data, selected = read_scenario(path, overrides, policies)
    return validate_scenario(only_run(data, selected), path, positions=selected)


def only_run(data: dict, selected: list[int] | None) -> dict:
    """``data`` with only the ``selected`` policies, and without a ``sweep.reference``
    naming one left out (a run does not use it; its resolved scenario must load again)."""
    data = rules.only_selected(data, selected)
    sweep = data.get("sweep")
    if selected is not None and isinstance(sweep, dict) and "reference" in sweep:
        labels = rules.policy_labels(data) or []
        if sweep["reference"] not in labels:
            data["sweep"] = {k: v for k, v in sweep.items() if k != "reference"}
    return data


def validate_scenario(
    data: dict, path: Path, *, warn: bool = True, positions: list[int] | None = None
) -> Scenario:
    """Validate a scenario mapping read from ``path``; with ``warn``, each value that is valid
    but probably not meant is issued as a :class:`~ftsim.scenario.notices.ScenarioWarning`
    (a sweep warns about its base scenario, not about every point). ``positions``: where
    each of ``data``'s policies stands in the file, when some were left out (``--policy``):
    problems and warnings name the file's ``policies.N``. The policy and failure-source
    kinds named, and the ``trainer:`` section's model if it has one, are imported first
    (import :mod:`ftsim.policies.catalog` once before: it provides the kinds)."""
    accept_named(data)
    try:
        scenario = Scenario.model_validate(data, context={"base_dir": path.parent})
    except ValidationError as exc:
        errors = _relevant(exc.errors())
        problems = [_describe(err, data) for err in errors]
        raise ScenarioError(path, _in_file(problems, positions)) from None
    problems = _yes_no_numbers(data, scenario) or scenario.problems()
    if problems:
        raise ScenarioError(path, _in_file(problems, positions))
    from ftsim.scenario.notices import ScenarioWarning, scenario_warnings

    for where, message in _in_file(scenario_warnings(scenario) if warn else [], positions):
        warnings.warn(ScenarioWarning(path, where, message), stacklevel=2)
    return scenario


def _in_file(problems: list[tuple[str, str]], positions: list[int] | None) -> list:
    """``problems`` (dotted path, message) with ``policies.N`` renumbered to the file's
    position of the N-th policy kept (``positions``; None: all were kept)."""
    if positions is None:
        return list(problems)
    out = []
    for where, message in problems:
        head, _, rest = where.partition(".")
        number, _, tail = rest.partition(".")
        if head == "policies" and number.isdigit() and int(number) < len(positions):
            where = ".".join(filter(None, ("policies", str(positions[int(number)]), tail)))
        out.append((where, message))
    return out


def _yes_no_numbers(raw, value, path: str = "") -> list[tuple[str, str]]:
    """(dotted path, message) for each yes/no given where a number is expected (YAML's
    ``true``, ``yes``, ``on``...): pydantic reads it as 1 or 0, so ``replications: yes``
    would run one replication without a word. ``value`` is what ``raw`` validated to."""
    if isinstance(raw, bool):
        if isinstance(value, int | float) and not isinstance(value, bool):
            got = "true" if raw else "false"
            return [(path or "(top level)", f"expected a number, not a yes/no value (got {got})")]
        return []
    if isinstance(raw, dict):
        if isinstance(value, BaseModel):
            fields = type(value).model_fields
            pairs = [(k, v, getattr(value, k)) for k, v in raw.items() if k in fields]
        elif isinstance(value, dict):
            pairs = [(k, v, value[k]) for k, v in raw.items() if k in value]
        else:
            return []
    elif isinstance(raw, list) and isinstance(value, list | tuple) and len(raw) == len(value):
        pairs = [(i, r, v) for i, (r, v) in enumerate(zip(raw, value, strict=True))]
    else:
        return []
    found = []
    for key, item, validated in pairs:
        found += _yes_no_numbers(item, validated, f"{path}.{key}" if path else str(key))
    return found


def input_digests(scenario: Scenario) -> dict[str, str]:
    """The SHA-256 of each file the scenario's failures replay (a trace, a failure log: a
    source's ``input_file()``), by its path: they are part of what a run ran (its config
    hash, its manifest). Empty for random failures."""
    digests = {}
    for source in scenario.failures:
        path = source.input_file()
        if path is not None:
            stat = path.stat()
            digests[str(path)] = _file_digest(str(path), stat.st_mtime_ns, stat.st_size)
    return digests


@functools.lru_cache(maxsize=64)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    """SHA-256 of the file ``path`` as it is at ``mtime_ns`` and ``size``: read once, though
    every point of a sweep and every config hash asks for it (a changed file asks anew)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def config_hash(scenario: Scenario) -> str:
    """A short stable hash of the resolved scenario (independent of key order, YAML layout,
    and values that have no effect: :func:`~ftsim.scenario.notices.resolved_data`) and of
    the files its failures replay (their SHA-256: a failure log edited after a run is
    another configuration, a sweep is not resumed over it)."""
    from ftsim.scenario.notices import resolved_data

    data, inputs = resolved_data(scenario), input_digests(scenario)
    canonical = json.dumps({"scenario": data, "inputs": inputs} if inputs else data, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


# -- turning pydantic errors into located one-line messages ---------------------------------


_SCALARS = ("str", "float", "int", "bool")


def _is_union_tag(item) -> bool:
    """Whether a pydantic location item names a member of a plain union (``float``,
    ``constrained-float``, ``list[constrained-float]``), not a key."""
    return isinstance(item, str) and ("[" in item or item.split("-")[-1] in _SCALARS)


def _relevant(errors: list[dict]) -> list[dict]:
    """The errors worth reporting: of a plain union (``1.05`` or ``[1.0, 1.2]``), pydantic
    reports every member; a member refused only for its type (a list where a number is
    expected) is dropped when another member of the same union has errors of its own."""

    def member(error):
        loc = error["loc"]
        at = next((i for i, item in enumerate(loc) if _is_union_tag(item)), None)
        return (loc[:at], loc[at]) if at is not None else None

    wrong_type = [member(e) is not None and e["type"].endswith("_type") for e in errors]
    others = {
        (member(e)[0], member(e)[1])
        for e, wrong in zip(errors, wrong_type, strict=True)
        if member(e) is not None and not wrong
    }
    kept = []
    for error, wrong in zip(errors, wrong_type, strict=True):
        if wrong:
            union, tag = member(error)
            if any(u == union and t != tag for u, t in others):
                continue
        kept.append(error)
    return kept


SYNONYMS = {"file": "path", "filename": "path", "file_name": "path", "type": "kind"}
"""Keys users write for a field of another name, which spelling alone would not suggest
(``file`` is closer to ``role`` than to ``path``)."""

_BOUNDS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")
"""Pydantic's error types of a number out of its bounds: a NaN fails every bound, and
"should be less than 1" would blame its size."""


def closest_name(name: str, valid: Sequence[str]) -> str | None:
    """The valid name the unknown ``name`` most likely meant: its synonym (:data:`SYNONYMS`)
    if valid, else the closest spelling (None when none is close)."""
    synonym = SYNONYMS.get(name.lower())
    if synonym in valid:
        return synonym
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.5)
    return close[0] if close else None


def _is_nan(value) -> bool:
    """Whether ``value`` (a number or the text of one) is NaN."""
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return False


def _describe(error: dict, data: dict) -> tuple[str, str]:
    path, model, raw = _locate(error["loc"], data)
    kind = error["type"]
    message = error["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    if kind == "extra_forbidden":
        name = str(error["loc"][-1])
        valid = list(model.model_fields) if model else []
        close = closest_name(name, valid)
        hint = f"; did you mean {close!r}?" if close else ""
        if valid:
            hint += f" (valid keys: {', '.join(valid)})"
        return path, f"unknown key {name!r}{hint}"
    if kind == "missing":
        return path, "is required but missing"
    if kind == "union_tag_invalid":
        tag = raw.get("kind") if isinstance(raw, dict) else raw
        expected = error.get("ctx", {}).get("expected_tags", "")
        tags = [t.strip(" '") for t in expected.split(",")]
        close = difflib.get_close_matches(str(tag), tags, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return _join(path, "kind"), f"unknown kind {tag!r}{hint} (valid: {expected})"
    if kind == "union_tag_not_found":
        keys = [str(key) for key in raw] if isinstance(raw, dict) else []
        instead = next((key for key in keys if closest_name(key, ["kind"])), None)
        hint = f" (is {instead!r} meant to be 'kind'?)" if instead else ""
        return _join(path, "kind"), f"is required but missing{hint}"
    if kind in _BOUNDS and _is_nan(error.get("input")):
        return path, f"must be a finite number (got {_show(error.get('input'))})"
    if kind.startswith("model_") and "or instance of" in message:  # a section given a value
        message = message[: message.index(" or instance of")]  # not the class's name
    scalar = kind.endswith(("_type", "_parsing")) and not kind.startswith(("model", "dict"))
    if "(got " in message or (isinstance(error.get("input"), dict) and not scalar):
        return path, message  # the value is shown already, or is a whole section
    return path, f"{message} (got {_show(error.get('input'))})"


def _locate(loc: tuple, data: dict) -> tuple[str, type[BaseModel] | None, object]:
    """Dotted path for ``loc`` (without union tags), the model owning the last key, raw value."""
    model: object = Scenario
    raw: object = data
    parts: list[str] = []
    owner: type[BaseModel] | None = Scenario
    tagged = False  # the union member of the current mapping is already chosen
    for item in loc:
        selects = not tagged and isinstance(raw, dict) and _kind(raw) == item
        member = _member_with_kind(model, item) if selects else None
        if member is not None:  # a ``kind`` choosing among models (not a field named so)
            model = member
            tagged = True
            continue
        tagged = False
        if _is_union_tag(item) and not (isinstance(raw, dict) and item in raw):
            continue
        parts.append(str(item))
        owner = _as_model(model)
        model = _child_type(model, item)
        if isinstance(raw, dict):
            raw = raw.get(item)
        elif isinstance(raw, list) and isinstance(item, int) and item < len(raw):
            raw = raw[item]
        else:
            raw = None
    return ".".join(parts), owner, raw


def _kind(raw: dict) -> str | None:
    """The ``kind`` a mapping selects: its ``kind``, or ``preset`` for the failure-preset
    shorthand ``{preset: NAME}``."""
    return raw.get("kind", "preset" if "preset" in raw else None)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _unwrap(tp):
    """Strip Annotated and Optional; a union of models is returned as is."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) == 1:
                tp = args[0]
            else:
                return tp
        else:
            return tp


def _as_model(tp) -> type[BaseModel] | None:
    tp = _unwrap(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _child_type(tp, item):
    tp = _unwrap(tp)
    model = _as_model(tp)
    if model is not None:
        field = model.model_fields.get(item)
        return field.annotation if field else None
    if typing.get_origin(tp) is list:
        return typing.get_args(tp)[0]
    return None


def _member_with_kind(tp, kind):
    tp = _unwrap(tp)
    members = (tp,) if _as_model(tp) else typing.get_args(tp)
    for member in members:
        member = _unwrap(member)
        field = getattr(member, "model_fields", {}).get("kind")
        if field is not None and kind in typing.get_args(field.annotation):
            return member
    return None


def _show(value: object) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
