"""Configuration of the embedded DLRM trainer (pydantic v2, strict: unknown keys are errors).

These models are meant to be embedded under a ``trainer:`` section of scenario YAML files.
Every size is in elements (rows, features, samples) unless a unit is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ftsim.trainer.limits import MAX_ZIPF_EXPONENT

#: Rows of the 26 Criteo Kaggle embedding tables (facebookresearch/dlrm ``ln_emb``), C1..C26.
KAGGLE_CARDINALITIES: tuple[int, ...] = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)  # fmt: skip

#: Number of integer (dense) features in Criteo data.
CRITEO_N_DENSE = 13


def capped_cardinalities(cap: int, cards: tuple[int, ...] = KAGGLE_CARDINALITIES) -> list[int]:
    """Table sizes ``min(card, cap)`` for each table (rows)."""
    return [min(int(c), int(cap)) for c in cards]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelConfig(_Strict):
    """DLRM architecture. Table sizes and the number of dense features come from the data config.

    The Kaggle reference (facebookresearch/dlrm) is the default: embedding dim 16, bottom MLP
    13-512-256-64-16, top MLP 367-512-256-1 (367 = 16 + 27*26/2 interaction pairs).
    """

    embedding_dim: int = Field(16, ge=1, description="Embedding vector length (floats per row).")
    bottom_mlp: list[int] = Field(
        default_factory=lambda: [512, 256, 64, 16],
        description="Widths of the bottom-MLP layers after the dense input; last = embedding_dim.",
    )
    top_mlp: list[int] = Field(
        default_factory=lambda: [512, 256, 1],
        description="Widths of the top-MLP layers after the interaction; last must be 1 (logit).",
    )
    dtype: Literal["float32", "float64"] = Field(
        "float32", description="Floating type of all parameters; float64 only for gradient checks."
    )
    seed: int = Field(0, description="Seed of the parameter initialisation stream.")

    @model_validator(mode="after")
    def _check_widths(self) -> ModelConfig:
        if not self.bottom_mlp or self.bottom_mlp[-1] != self.embedding_dim:
            raise ValueError("bottom_mlp must be non-empty and end with embedding_dim")
        if not self.top_mlp or self.top_mlp[-1] != 1:
            raise ValueError("top_mlp must be non-empty and end with 1")
        if min(self.bottom_mlp + self.top_mlp) < 1:
            raise ValueError("layer widths must be >= 1")
        return self


class DenseOptimizerConfig(_Strict):
    """Optimizer of the MLP parameters (replicated on trainers in the simulated system)."""

    kind: Literal["sgd", "momentum", "adagrad", "adam"] = Field("sgd", description="Update rule.")
    lr: float = Field(0.1, gt=0, description="Learning rate.")
    momentum: float = Field(0.9, ge=0, lt=1, description="Momentum coefficient (kind=momentum).")
    eps: float = Field(1e-8, gt=0, description="Adagrad / Adam denominator epsilon.")
    beta1: float = Field(0.9, ge=0, lt=1, description="Adam first-moment decay (kind=adam).")
    beta2: float = Field(0.999, ge=0, lt=1, description="Adam second-moment decay (kind=adam).")


class SparseOptimizerConfig(_Strict):
    """Optimizer of the embedding rows; its state is held per row (see ``embeddings.py``).

    ``momentum`` keeps a buffer shaped like the table; ``rowwise_adagrad`` keeps one float per
    row (mean squared gradient accumulated over the row's elements). Only rows a batch touched
    are updated (lazy/sparse semantics, as in PyTorch sparse SGD and FBGEMM).
    """

    kind: Literal["sgd", "momentum", "rowwise_adagrad"] = Field("sgd", description="Update rule.")
    lr: float = Field(0.1, gt=0, description="Learning rate.")
    momentum: float = Field(0.9, ge=0, lt=1, description="Momentum coefficient (kind=momentum).")
    eps: float = Field(1e-8, gt=0, description="Row-wise Adagrad denominator epsilon.")


class OptimizerConfig(_Strict):
    """Dense (MLP) and sparse (embedding) optimizers."""

    dense: DenseOptimizerConfig = Field(default_factory=DenseOptimizerConfig)
    sparse: SparseOptimizerConfig = Field(default_factory=SparseOptimizerConfig)


ZipfExponent = Annotated[float, Field(ge=0, le=MAX_ZIPF_EXPONENT)]
"""A power-law exponent of row popularity (0: uniform); the bounds apply to each value of a
list too (a bound on the union itself cannot apply to a list)."""


class SyntheticDataConfig(_Strict):
    """Synthetic click data with learnable labels drawn from a hidden teacher model.

    Row popularity of each table follows a power law ``p(rank k) ∝ k**-zipf_exponent``; rank
    is mapped to row id by a fixed random permutation per table.
    """

    kind: Literal["synthetic"] = "synthetic"
    seed: int = Field(0, description="Seed of teacher, popularity permutation and batches.")
    n_dense: int = Field(CRITEO_N_DENSE, ge=1, description="Dense features per sample.")
    cardinalities: list[int] | None = Field(
        None, description="Rows per table; None = the 26 Criteo Kaggle sizes capped at row_cap."
    )
    row_cap: int = Field(100_000, ge=2, description="Cap applied to every table size (rows).")
    zipf_exponent: ZipfExponent | list[ZipfExponent] = Field(
        1.05, description="Power-law exponent of row popularity, one value or one per table."
    )
    positive_rate: float = Field(0.25, gt=0, lt=1, description="Target click rate (fraction).")
    teacher_dim: int = Field(4, ge=1, description="Teacher embedding length (pairwise term).")
    teacher_scale: float = Field(
        1.0, gt=0, description="Multiplier on the teacher's logit spread (higher = easier task)."
    )

    def table_sizes(self) -> list[int]:
        """Rows of each table."""
        if self.cardinalities is not None:
            return [int(c) for c in self.cardinalities]
        return capped_cardinalities(self.row_cap)

    @model_validator(mode="after")
    def _check(self) -> SyntheticDataConfig:
        if self.cardinalities is not None and (
            not self.cardinalities or min(self.cardinalities) < 1
        ):
            raise ValueError("cardinalities must be a non-empty list of positive sizes")
        if isinstance(self.zipf_exponent, list) and len(self.zipf_exponent) != len(
            self.table_sizes()
        ):
            raise ValueError("zipf_exponent list must have one value per table")
        return self


class CriteoDataConfig(_Strict):
    """Raw Criteo TSV (Kaggle ``train.txt`` or Terabyte ``day_N``), streamed in chunks.

    The first ``eval_samples`` (trainer setting) valid lines are held out for evaluation;
    training batches are the following lines, in file order.
    """

    kind: Literal["criteo"] = "criteo"
    path: str = Field(..., description="Path of the tab-separated file.")
    cardinalities: list[int] | None = Field(
        None, description="Hash-table rows per feature; None = Kaggle sizes capped at row_cap."
    )
    row_cap: int = Field(100_000, ge=2, description="Cap applied to every table size (rows).")
    chunk_lines: int = Field(65_536, ge=1, description="Lines parsed per chunk (memory bound).")
    on_error: Literal["fail", "skip"] = Field(
        "fail", description="Malformed line: raise (with line number) or skip it."
    )

    def table_sizes(self) -> list[int]:
        """Rows of each hash table (index 0 of every table is reserved for 'missing')."""
        sizes = (
            [int(c) for c in self.cardinalities]
            if self.cardinalities is not None
            else capped_cardinalities(self.row_cap)
        )
        if len(sizes) != len(KAGGLE_CARDINALITIES):
            raise ValueError("Criteo data has 26 categorical features")
        return [max(2, s) for s in sizes]


DataConfig = Annotated[SyntheticDataConfig | CriteoDataConfig, Field(discriminator="kind")]


class ShardingConfig(_Strict):
    """Placement of embedding rows on embedding parameter servers (shards)."""

    n_shards: int = Field(4, ge=1, description="Number of embedding parameter servers.")
    placement: Literal["row_round_robin", "table_wise"] = Field(
        "row_round_robin",
        description="row_round_robin: global row g lives on shard g % n_shards; table_wise: "
        "whole tables, largest first onto the least-loaded shard.",
    )


class HooksConfig(_Strict):
    """Cheap always-on bookkeeping for the CPR strategies."""

    mfu_counters: bool = Field(True, description="Count uses of every embedding row (CPR-MFU).")


class TrainerConfig(_Strict):
    """Everything the embedded trainer needs."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    data: DataConfig = Field(default_factory=SyntheticDataConfig)
    sharding: ShardingConfig = Field(default_factory=ShardingConfig)
    hooks: HooksConfig = Field(default_factory=HooksConfig)
    batch_size: int = Field(128, ge=1, description="Samples per training step.")
    eval_samples: int = Field(16_384, ge=2, description="Size of the fixed held-out set.")


TRAINER_PRESETS: dict[str, dict] = {
    "converged": {
        "steps": 20_000,
        "batch_size": 1024,
        "eval_samples": 8192,
        "model": {"embedding_dim": 8, "bottom_mlp": [32, 8], "top_mlp": [32, 1]},
        "optimizer": {
            "dense": {"kind": "adam", "lr": 0.003},
            "sparse": {"kind": "rowwise_adagrad", "lr": 0.3},
        },
        "data": {"kind": "synthetic", "row_cap": 1000},
    },
}
"""Named trainer configurations, as the fields of a scenario's ``trainer:`` section
(``trainer: {preset: NAME}``; fields given beside the preset replace the preset's).

``converged``: prod50h's trainer (26 synthetic tables capped at 1,000 rows, dimension 8, the
same MLPs) trained close to the synthetic teacher's optimum: batch 1,024, 20,000 steps,
row-wise Adagrad for the rows and Adam for the MLPs. Its failure-free model gets about 0.9
of the way from a constant predictor to the teacher, where prod50h's gets 0.19
(``docs/trainer.md``, ``docs/accuracy_scale.md``). A failure-free training takes about
2 min of one core (40 times prod50h's): run it with ``--jobs`` across cores."""


def with_preset(section: Mapping) -> dict:
    """A ``trainer:`` section with its ``preset`` (if it names one of :data:`TRAINER_PRESETS`)
    filled in: the preset's fields, with those the section gives replacing them (mappings
    merged key by key, so ``{preset: converged, model: {seed: 3}}`` keeps the preset's
    widths)."""
    name = section.get("preset")
    preset = TRAINER_PRESETS.get(name) if isinstance(name, str) else None
    return _merged(preset, section) if preset is not None else dict(section)


def _merged(base: Mapping, given: Mapping) -> dict:
    """``base`` with ``given``'s keys replacing its own, mappings merged recursively (a
    mapping with a different ``kind`` replaces the preset's whole)."""
    out = dict(base)
    for key, value in given.items():
        old = out.get(key)
        same_kind = isinstance(old, Mapping) and isinstance(value, Mapping)
        if same_kind and value.get("kind", old.get("kind")) == old.get("kind"):
            out[key] = _merged(old, value)
        else:
            out[key] = value
    return out
