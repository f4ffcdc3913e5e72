"""What the figures read from a run folder (``run`` or ``sweep``): never a new simulation."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from ftsim.experiments.stats import summarize, with_point
from ftsim.plots.style import PolicyStyle, policy_styles


class Skip(Exception):
    """A figure that this run folder cannot support; the message says why."""


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

    def describe_point(self, point: int) -> str:
        """``key=value, …`` of a sweep point ('' for a plain run)."""
        row = self.runs[self.runs["point"] == point].iloc[0]
        return ", ".join(f"{c.rsplit('.', 1)[-1]}={row[c]}" for c in self.columns)

    def point_scenario(self, point: int):
        """The resolved scenario of ``point``, rebuilt from scenario.yaml and the manifest.

        ``trainer.sharding.n_shards`` is dropped: it is derived from ``cluster.emb_ps``, which
        the point may change (and folders written before it was resolved hold a wrong one).
        """
        from ftsim.scenario import overrides as rules
        from ftsim.scenario.loader import read_yaml, validate_scenario

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
        return validate_scenario(rules.only_selected(data, positions), path)
