"""Embedded NumPy DLRM trainer (no SimPy): model, sharded embedding state, data, metrics.

Entry point: :class:`Trainer` built from a :class:`TrainerConfig`. See ``docs/trainer.md``.

The names below are imported from their modules when first used (:func:`__getattr__`), so
that the scenario schema can import :mod:`ftsim.trainer.config` without loading the trainer
itself (a timing-only run never trains: 15–20 ms of start-up saved).
"""

from __future__ import annotations

import importlib

_MODULES = {
    "config": (
        "KAGGLE_CARDINALITIES",
        "CriteoDataConfig",
        "DenseOptimizerConfig",
        "HooksConfig",
        "ModelConfig",
        "OptimizerConfig",
        "ShardingConfig",
        "SparseOptimizerConfig",
        "SyntheticDataConfig",
        "TrainerConfig",
    ),
    "criteo": ("CriteoData", "CriteoFormatError"),
    "data": ("Batch", "SharedData", "SyntheticData"),
    "embeddings": ("RowData", "ShardedEmbeddings", "SparseUpdate"),
    "metrics": ("auc", "binary_entropy", "log_loss"),
    "trainer": ("Trainer", "TrainerSnapshot"),
    "usage": ("UseCounter", "UseSampler"),
}
"""Submodule → the names this package exports from it."""

_HOME = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    """An exported name, imported from its submodule on first use (PEP 562)."""
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
