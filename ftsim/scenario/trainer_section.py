"""The scenario's ``trainer:`` section: the embedded NumPy DLRM's configuration
(:mod:`ftsim.trainer.config`) as a scenario gives it.

Imported only for a scenario that has the section
(:func:`ftsim.scenario.schema.accept_trainer_section`): a timing-only scenario's start-up
does without the trainer's config and its models.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ftsim.trainer.config import TRAINER_PRESETS, ShardingConfig, TrainerConfig, with_preset

MAX_TRAINER_STEPS = 1_000_000
"""Most steps of the embedded trainer per replication (each is a real forward/backward pass)."""


class EmbeddingSharding(ShardingConfig):
    """Placement of the model's embedding rows on its shards, the cluster's embedding PS."""

    n_shards: int | None = Field(
        None, ge=1, description="shards of the model: cluster.emb_ps (filled in when left out)"
    )


class TrainerSection(TrainerConfig):
    """The embedded NumPy DLRM trained inside the simulation (co-simulation).

    ``steps`` real trainer steps stand for the whole failure-free training run: simulated
    progress p maps to step round(p / work × steps). The model's embedding shards are the
    cluster's embedding PS: ``sharding.n_shards`` is ``cluster.emb_ps`` (filled in when left
    out, so the resolved scenario saved with the results says what was trained).
    """

    sharding: EmbeddingSharding = Field(default_factory=EmbeddingSharding)

    preset: Literal[tuple(TRAINER_PRESETS)] | None = Field(
        None,
        description="a named trainer configuration filling in the fields not given "
        "(docs/trainer.md, ftsim.trainer.config.TRAINER_PRESETS)",
    )
    enabled: bool = Field(True, description="train the model inside the simulation")
    steps: int = Field(
        1000, ge=1, le=MAX_TRAINER_STEPS, description="trainer steps standing for the whole run"
    )
    replications: int = Field(
        3, ge=1, description="replications (the first ones) that also train the model"
    )
    share_prefix: bool = Field(
        True,
        description="fork each policy from the failure-free run at its first divergence "
        "instead of retraining the common prefix (results are identical)",
    )

    @model_validator(mode="before")
    @classmethod
    def _expand_preset(cls, data):
        """``preset``'s fields under those the section gives (an unknown name is left to
        the field's own validation, which names the presets)."""
        return with_preset(data) if isinstance(data, dict) else data
