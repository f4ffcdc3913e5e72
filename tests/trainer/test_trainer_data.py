"""Synthetic generator: determinism by batch index, power law, base rate, teacher, config."""

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from ftsim.trainer import KAGGLE_CARDINALITIES, SyntheticData, SyntheticDataConfig, TrainerConfig
from ftsim.trainer.config import DataConfig
from ftsim.trainer.metrics import binary_entropy, log_loss

CFG = SyntheticDataConfig(seed=4, n_dense=3, cardinalities=[5, 40, 1000, 20_000])


def test_batches_are_functions_of_seed_and_index():
    a, b = SyntheticData(CFG, 32), SyntheticData(CFG, 32)
    for i in (5, 0, 5):  # any order, any number of times
        x, y = a.batch(i), b.batch(i)
        np.testing.assert_array_equal(x.cat, y.cat)
        np.testing.assert_array_equal(x.dense, y.dense)
        np.testing.assert_array_equal(x.label, y.label)
    assert not np.array_equal(a.batch(0).cat, a.batch(1).cat)
    other = SyntheticData(CFG.model_copy(update={"seed": 5}), 32)
    assert not np.array_equal(a.batch(0).cat, other.batch(0).cat)
    x = a.batch(0)
    assert x.dense.dtype == np.float32 and x.label.dtype == np.float32 and x.cat.dtype == np.int64
    assert x.cat.shape == (32, 4) and np.all(x.cat < np.array(CFG.cardinalities))


def test_power_law_popularity():
    data = SyntheticData(CFG, 1)
    cat = data.eval_set(50_000).cat[:, 3]
    counts = np.sort(np.bincount(cat, minlength=20_000))[::-1]
    share = counts[:200].sum() / counts.sum()  # top 1% of rows
    expected = data.rows.top_share(3, 0.01)
    assert 0.5 < expected < 0.75  # zipf 1.05 over 20k rows
    assert abs(share - expected) < 0.02
    steeper = SyntheticData(CFG.model_copy(update={"zipf_exponent": [1.0, 1.0, 1.0, 2.0]}), 1)
    assert steeper.rows.top_share(3, 0.01) > 0.95


def test_positive_rate_and_teacher_is_informative():
    data = SyntheticData(CFG.model_copy(update={"positive_rate": 0.1}), 1)
    ev = data.eval_set(40_000)
    assert abs(ev.label.mean() - 0.1) < 0.01
    assert abs(ev.prob.mean() - 0.1) < 0.01
    assert log_loss(ev.label, ev.prob) < binary_entropy(0.1) - 0.03


def test_default_cardinalities_are_capped_kaggle():
    cfg = SyntheticDataConfig(row_cap=1000)
    assert cfg.table_sizes() == [min(c, 1000) for c in KAGGLE_CARDINALITIES]
    assert len(KAGGLE_CARDINALITIES) == 26 and sum(KAGGLE_CARDINALITIES) == 33_762_577


def test_config_strict_and_discriminated():
    with pytest.raises(ValidationError):
        SyntheticDataConfig(bogus=1)
    with pytest.raises(ValidationError):
        TrainerConfig(batch_size=8, unknown=True)
    with pytest.raises(ValidationError):
        TrainerConfig.model_validate({"model": {"embedding_dim": 8}})  # bottom must end with 8
    d = TypeAdapter(DataConfig).validate_python({"kind": "criteo", "path": "x.tsv"})
    assert d.kind == "criteo" and d.table_sizes()[0] == 1460
    cfg = TrainerConfig.model_validate(
        {"data": {"kind": "synthetic", "zipf_exponent": 1.2}, "sharding": {"n_shards": 8}}
    )
    assert cfg.data.zipf_exponent == 1.2 and cfg.sharding.n_shards == 8
    assert TrainerConfig.model_validate(cfg.model_dump()) == cfg
