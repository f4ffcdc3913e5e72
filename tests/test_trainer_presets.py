"""Trainer presets (``trainer: {preset: NAME}``): the preset's fields fill in those not
given, fields given beside it win (mappings merged key by key), and the resolved scenario
saved with a run loads to the same trainer."""

from __future__ import annotations

import pytest
import yaml

from ftsim.scenario.loader import load_scenario, validate_scenario
from ftsim.scenario.trainer_section import TrainerSection
from ftsim.trainer.config import TRAINER_PRESETS
from tests.conftest import SCENARIOS

CONVERGED = TRAINER_PRESETS["converged"]


def _trainer(*sets: str) -> TrainerSection:
    return load_scenario(SCENARIOS / "cpr_pls.yaml", list(sets)).trainer


def test_a_preset_replaces_the_files_section_with_its_own_fields():
    trainer = _trainer("trainer={preset: converged}")
    assert trainer.preset == "converged"
    assert trainer.steps == CONVERGED["steps"] != 600  # the file's own 600 steps are gone
    assert trainer.batch_size == CONVERGED["batch_size"] != 256
    assert trainer.optimizer.model_dump(include={"dense": {"kind", "lr"}}) == {
        "dense": CONVERGED["optimizer"]["dense"]
    }
    assert trainer.optimizer.sparse.kind == CONVERGED["optimizer"]["sparse"]["kind"]
    assert trainer.model.bottom_mlp == CONVERGED["model"]["bottom_mlp"]
    assert trainer.data.row_cap == CONVERGED["data"]["row_cap"]


def test_fields_given_beside_the_preset_replace_its_own_key_by_key():
    trainer = _trainer(
        "trainer={preset: converged, steps: 100, model: {seed: 3}}",
        "trainer.optimizer.dense.lr=0.5",
        "trainer.replications=2",
    )
    assert (trainer.steps, trainer.replications, trainer.model.seed) == (100, 2, 3)
    assert trainer.model.embedding_dim == CONVERGED["model"]["embedding_dim"]  # kept
    assert trainer.optimizer.dense.kind == CONVERGED["optimizer"]["dense"]["kind"]
    assert trainer.optimizer.dense.lr == 0.5


def test_data_of_another_kind_replaces_the_presets_data_whole():
    section = TrainerSection.model_validate(
        {"preset": "converged", "data": {"kind": "criteo", "path": "day_0"}}
    )
    default_cap = TrainerSection.model_validate({"data": {"kind": "criteo", "path": "x"}})
    assert section.data.row_cap == default_cap.data.row_cap != CONVERGED["data"]["row_cap"]


def test_the_resolved_scenario_loads_to_the_same_trainer(tmp_path):
    scenario = load_scenario(SCENARIOS / "cpr_pls.yaml", ["trainer={preset: converged}"])
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))
    assert validate_scenario(yaml.safe_load(path.read_text()), path).trainer == scenario.trainer


def _within(part: dict, whole: dict) -> bool:
    """Whether every value of ``part`` is ``whole``'s at the same key (mappings recursively)."""
    return all(
        _within(v, whole[k]) if isinstance(v, dict) else whole.get(k) == v for k, v in part.items()
    )


@pytest.mark.parametrize("name", sorted(TRAINER_PRESETS))
def test_every_preset_is_a_valid_section_that_keeps_its_values(name):
    section = TrainerSection.model_validate({"preset": name}).model_dump(mode="json")
    assert _within(TRAINER_PRESETS[name], section)
    assert not _within({"steps": -1}, section)  # the check can fail
