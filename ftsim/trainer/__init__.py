"""Embedded NumPy DLRM trainer (no SimPy): model, sharded embedding state, data, metrics.

Entry point: :class:`Trainer` built from a :class:`TrainerConfig`. See ``docs/trainer.md``.
"""

from ftsim.trainer.config import (
    KAGGLE_CARDINALITIES,
    CriteoDataConfig,
    DenseOptimizerConfig,
    HooksConfig,
    ModelConfig,
    OptimizerConfig,
    ShardingConfig,
    SparseOptimizerConfig,
    SyntheticDataConfig,
    TrainerConfig,
)
from ftsim.trainer.criteo import CriteoData, CriteoFormatError
from ftsim.trainer.data import Batch, SharedData, SyntheticData
from ftsim.trainer.embeddings import RowData, ShardedEmbeddings, SparseUpdate
from ftsim.trainer.metrics import auc, binary_entropy, log_loss
from ftsim.trainer.trainer import Trainer, TrainerSnapshot
from ftsim.trainer.usage import UseCounter, UseSampler

__all__ = [
    "KAGGLE_CARDINALITIES",
    "Batch",
    "CriteoData",
    "CriteoDataConfig",
    "CriteoFormatError",
    "DenseOptimizerConfig",
    "HooksConfig",
    "ModelConfig",
    "OptimizerConfig",
    "RowData",
    "ShardedEmbeddings",
    "ShardingConfig",
    "SparseOptimizerConfig",
    "SharedData",
    "SparseUpdate",
    "SyntheticData",
    "SyntheticDataConfig",
    "Trainer",
    "TrainerConfig",
    "TrainerSnapshot",
    "UseCounter",
    "UseSampler",
    "auc",
    "binary_entropy",
    "log_loss",
]
