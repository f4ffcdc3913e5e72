"""What the figures read from a run folder (``run`` or ``sweep``): never a new simulation.

A sweep's points vary along *dimensions*: each ``grid`` key is one, and the keys of the
``zip`` together are one more (they vary together, so they are one axis of the study). A
dimension whose keys all start with ``policies.`` is a *policy knob* (the interval, a target
PLS, ECRM's k, …); any other (failure rates, the cluster, the job) is the *environment*,
which figures show as separate panels and never optimise over.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from ftsim.experiments.stats import SI_SUFFIX, summarize, with_point
from ftsim.plots.style import PolicyStyle, policy_styles

INTERVAL_KEYS = {"interval", "checkpoint_interval", "target_pls", "target_accuracy_loss"}
INTERVAL_KEYS |= {"pls_slope"}
"""Swept fields that set a policy's checkpoint interval (the interval figure's x axis)."""


class Skip(Exception):
    """A figure that this run folder cannot support; the message says why."""


@dataclass(frozen=True)
class Dimension:
    """One axis of a sweep: a grid key, or all the zip's keys (they vary together)."""

    keys: tuple[str, ...]
    values: tuple[tuple, ...]
    """The dimension's values (one entry per key), in the sweep's order."""

    @property
    def policy_knob(self) -> bool:
        """Whether it only changes policies (a knob to optimise), not the environment."""
        return all(k.startswith("policies.") for k in self.keys)

    @property
    def sets_interval(self) -> bool:
        """Whether one of its keys sets a checkpoint interval (directly or by a target)."""
        return any(k.rsplit(".", 1)[-1] in INTERVAL_KEYS for k in self.keys)

    @property
    def name(self) -> str:
        return " & ".join(self.keys)

    @staticmethod
    def label(value: tuple) -> str:
        """A value as a panel title: the values only (the keys are in the figure's title)."""
        return ", ".join(map(str, value))


@dataclass
class RunData:
    """``runs.csv``, ``timeline.csv``, ``manifest.json`` and ``scenario.yaml`` of a run folder."""

    root: Path
    runs: pd.DataFrame
    timeline: pd.DataFrame
    manifest: dict
    columns: list[str] = field(default_factory=list)
    """Swept keys (point columns); empty for a plain run."""
    omitted: dict[str, list[str]] = field(default_factory=dict)
    """Per figure: the overlays it was drawn without, and why (printed by ``plot``)."""

    @classmethod
    def load(cls, root: Path) -> RunData:
        root = Path(root)
        manifest = json.loads((root / "manifest.json").read_text())
        runs = with_point(pd.read_csv(root / "runs.csv"))
        timeline_path = root / "timeline.csv"
        timeline = pd.read_csv(timeline_path) if timeline_path.stat().st_size else pd.DataFrame()
        if len(timeline):
            timeline = with_point(timeline)
        return cls(root, runs, timeline, manifest, list(manifest.get("columns", [])))

    @cached_property
    def dimensions(self) -> list[Dimension]:
        """The dimensions along which the points vary (constant keys are none), in the
        order of the swept columns; the zip's keys form one, as ``scenario.yaml`` says."""
        zipped = set(self._sweep_section().get("zip") or {}) & set(self.columns)
        groups = [(c,) for c in self.columns if c not in zipped]
        if zipped:
            groups.append(tuple(c for c in self.columns if c in zipped))
        firsts = self.runs.drop_duplicates("point")
        out = []
        for keys in groups:
            values = tuple(dict.fromkeys(zip(*(firsts[k] for k in keys), strict=True)))
            if len(values) > 1:
                out.append(Dimension(keys, values))
        return out

    def value_of(self, point: int, dimension: Dimension) -> tuple:
        """The value of ``dimension`` at ``point``."""
        row = self._point_rows.loc[point]
        return tuple(row[k] for k in dimension.keys)

    @cached_property
    def _point_rows(self) -> pd.DataFrame:
        return self.runs.drop_duplicates("point").set_index("point")

    def _sweep_section(self) -> dict:
        """``sweep:`` of the saved scenario ({} when it is missing or unreadable: then every
        swept key is a dimension of its own)."""
        import yaml

        from ftsim.scenario.files import TextFileError, read_text

        try:  # a regular UTF-8 file only: a FIFO hung plot, bytes not UTF-8 were a traceback
            data = yaml.safe_load(read_text(self.root / "scenario.yaml"))
        except (TextFileError, yaml.YAMLError):
            return {}
        section = data.get("sweep") if isinstance(data, dict) else None
        return section if isinstance(section, dict) else {}

    @cached_property
    def decisions(self) -> pd.Series:
        """CPR's recovery per (point, policy): ``partial``, ``full`` (it fell back to full
        recovery at Daly's interval) or ``mixed``; empty without a ``cpr_decision`` column."""
        if not self.has("cpr_decision"):
            return pd.Series(dtype=object)
        rows = self.runs.dropna(subset=["cpr_decision"])
        return rows.groupby(["point", "policy"])["cpr_decision"].agg(
            lambda d: d.iloc[0] if d.nunique() == 1 else "mixed"
        )

    @property
    def policies(self) -> list[str]:
        """Policy labels in the run's order."""
        return list(dict.fromkeys(self.runs["policy"]))

    @cached_property
    def styles(self) -> dict[str, PolicyStyle]:
        """Colour, marker and display name per label (see :func:`policy_styles`)."""
        kinds = self.runs.drop_duplicates("policy").set_index("policy")["kind"]
        return policy_styles({label: str(kinds.get(label, label)) for label in self.policies})

    @cached_property
    def summary(self) -> pd.DataFrame:
        return summarize(self.runs, self.columns, self.manifest.get("reference"))

    @property
    def scenario_name(self) -> str:
        return str(self.runs["scenario"].iloc[0])

    def omit(self, figure: str, reason: str) -> None:
        """Note that ``figure`` leaves out an overlay, and why, so ``plot`` can say so."""
        self.omitted.setdefault(figure, []).append(reason)

    def has(self, column: str) -> bool:
        """Whether ``column`` exists with at least one value."""
        return column in self.runs and self.runs[column].notna().any()

    def describe_point(
        self, point: int, policy: str | None = None, among: Collection[str] | None = None
    ) -> str:
        """``key=value, …`` of a sweep point ('' for a plain run); with ``policy`` (a label),
        only the keys that set something of that policy's row: not a key of another policy
        (``policies.1.…`` on full), nor a wildcard key of a field it does not have;
        ``among``: only these swept keys."""
        rows = self.runs[self.runs["point"] == point]
        if policy is not None:
            rows = rows[rows["policy"] == policy]
        row = rows.iloc[0]
        keys = [c for c in self.columns if policy is None or self._sets(c, policy, row)]
        keys = [c for c in keys if among is None or c in among]
        return ", ".join(f"{c.rsplit('.', 1)[-1]}={row[c]}" for c in keys)

    def _sets(self, key: str, policy: str, row: pd.Series) -> bool:
        """Whether the swept ``key`` sets something of ``policy`` (a label) in ``row``."""
        parts = key.split(".")
        if parts[0] != "policies" or len(parts) < 2:
            return True
        if parts[1] == "*":  # a policy without the field has no value in its SI column
            si = row.get(key + SI_SUFFIX)
            return si is None or si == si
        labels = list(self.manifest.get("policies", []))
        positions = self.manifest.get("policy_positions") or list(range(len(labels)))
        return policy in labels and str(positions[labels.index(policy)]) == parts[1]

    def point_scenario(self, point: int):
        """The resolved scenario of ``point``, rebuilt from scenario.yaml and the manifest.

        ``trainer.sharding.n_shards`` is dropped: it is derived from ``cluster.emb_ps``, which
        the point may change (and folders written before it was resolved hold a wrong one).
        """
        from ftsim.policies import catalog  # noqa: F401 (the kinds the scenario may name)
        from ftsim.scenario import overrides as rules
        from ftsim.scenario.loader import read_yaml, validate_scenario
        from ftsim.scenario.notices import ScenarioWarning

        path = self.root / "scenario.yaml"
        data = {k: v for k, v in read_yaml(path).items() if k != "sweep"}
        if isinstance(data.get("trainer"), dict):
            data["trainer"].get("sharding", {}).pop("n_shards", None)
        positions = self.manifest.get("policy_positions")  # --policy: file indices
        data = rules.at_file_positions(data, positions)
        for entry in self.manifest.get("points", []):
            if entry["point"] == point:
                for key, value in entry["values"].items():
                    rules.assign(data, key, copy.deepcopy(value), positions)
        with warnings.catch_warnings():  # ftsim's own resolved file: its notes were said
            warnings.simplefilter("ignore", ScenarioWarning)  # when the sweep read the input
            return validate_scenario(rules.only_selected(data, positions), path)
