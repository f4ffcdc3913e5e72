"""Shared fixtures of the trainer tests: small configurations and the shared data folder."""

from pathlib import Path

import pytest

from ftsim.trainer import (
    DenseOptimizerConfig,
    ModelConfig,
    OptimizerConfig,
    ShardingConfig,
    SparseOptimizerConfig,
    SyntheticDataConfig,
    TrainerConfig,
)

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def small_config(
    *,
    sparse: str = "sgd",
    dense: str = "sgd",
    lr: float = 0.1,
    placement: str = "row_round_robin",
    dtype: str = "float32",
    batch_size: int = 64,
    seed: int = 0,
) -> TrainerConfig:
    """A tiny DLRM (5 tables, dim 4) on synthetic data: fast enough for unit tests."""
    return TrainerConfig(
        model=ModelConfig(embedding_dim=4, bottom_mlp=[8, 4], top_mlp=[8, 1], dtype=dtype),
        data=SyntheticDataConfig(seed=seed, n_dense=3, cardinalities=[7, 30, 100, 3, 250]),
        optimizer=OptimizerConfig(
            dense=DenseOptimizerConfig(kind=dense, lr=lr),
            sparse=SparseOptimizerConfig(kind=sparse, lr=lr),
        ),
        sharding=ShardingConfig(n_shards=3, placement=placement),
        batch_size=batch_size,
        eval_samples=512,
    )


@pytest.fixture
def make_config():
    """Factory of small trainer configurations (see ``small_config``)."""
    return small_config


@pytest.fixture
def shared_data() -> Path:
    """The shared Criteo sample folder (tests using it skip when it is absent)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} not present")
    return SHARED_DATA
