"""Criteo TSV loader: real sample file (skipped when absent) and malformed input."""

import numpy as np
import pytest

from ftsim.trainer import CriteoData, CriteoDataConfig, CriteoFormatError, Trainer, TrainerConfig
from ftsim.trainer.criteo import parse_lines

SIZES = np.array([1000] * 26)


def good_line(label="0", dense="1", cat="a1b2c3d4") -> str:
    return "\t".join([label] + [dense] * 13 + [cat] * 26)


def test_real_terabyte_head(shared_data):
    path = shared_data / "criteo_tb_head1k.tsv"
    if not path.exists():
        pytest.skip("criteo_tb_head1k.tsv absent")
    cfg = CriteoDataConfig(path=str(path), row_cap=1000, chunk_lines=300)
    data = CriteoData(cfg, batch_size=128, eval_samples=200)
    every = data.samples(0, 5000)
    assert len(every) == 1000 and data.skipped_lines == 0
    assert abs(every.label.mean() - 0.021) < 1e-9  # documented label rate of the file
    assert every.dense.dtype == np.float32 and every.dense.min() >= 0
    assert np.all(every.cat >= 0) and np.all(every.cat < 1000)
    assert (every.cat == 0).mean() > 0  # missing values -> reserved row 0
    # chunk boundaries do not change the result
    one_chunk = CriteoData(cfg.model_copy(update={"chunk_lines": 10_000}), 128, 200)
    np.testing.assert_array_equal(one_chunk.samples(0, 5000).cat, every.cat)
    # batches by index: after eval rows, replayable, wrapping after the end (800 // 128 = 6)
    np.testing.assert_array_equal(data.batch(0).cat, every.cat[200:328])
    np.testing.assert_array_equal(data.batch(6).cat, data.batch(0).cat)
    np.testing.assert_array_equal(data.batch(2).dense, every.dense[456:584])
    trainer = Trainer(
        TrainerConfig(data=cfg, batch_size=128, eval_samples=200, model={"embedding_dim": 16})
    )
    trainer.train(2)
    assert np.isfinite(trainer.evaluate()["logloss"])


def test_parse_values():
    line = "\t".join(["1", "-3", "", "7"] + ["0"] * 10 + ["", "00000001", "ffffffff"] + ["a"] * 23)
    batch, skipped = parse_lines([line.encode() + b"\n"], 1, SIZES, "fail")
    assert skipped == 0 and batch.label[0] == 1.0
    np.testing.assert_allclose(batch.dense[0, :3], [0.0, 0.0, np.log1p(7)], rtol=1e-6)
    assert (
        batch.cat[0, 0] == 0 and 1 <= batch.cat[0, 1] < 1000 and batch.cat[0, 2] != batch.cat[0, 1]
    )
    again, _ = parse_lines([line.encode()], 1, SIZES, "fail")
    np.testing.assert_array_equal(again.cat, batch.cat)  # stable hashing


@pytest.mark.parametrize(
    "bad, reason",
    [
        ("0\t1\t2", "fields"),
        (good_line(label="2"), "label"),
        (good_line(dense="x1"), "integer"),
        (good_line(cat="zz"), "hex"),
        (good_line(cat="123456789"), "hex"),
    ],
)
def test_malformed_lines(tmp_path, bad, reason):
    path = tmp_path / "bad.tsv"
    lines = [good_line(label=str(i % 2)) for i in range(9)]
    lines.insert(6, bad)
    path.write_text("\n".join(lines) + "\n")
    cfg = CriteoDataConfig(path=str(path), chunk_lines=4)
    with pytest.raises(CriteoFormatError, match=reason) as err:
        CriteoData(cfg, batch_size=2, eval_samples=2).samples(0, 100)
    assert err.value.line_no == 7
    skip = CriteoData(cfg.model_copy(update={"on_error": "skip"}), batch_size=2, eval_samples=2)
    assert len(skip.samples(0, 100)) == 9 and skip.skipped_lines == 1


def test_a_format_error_crosses_process_boundaries_intact():
    """Raised in a worker process, the error is pickled back to the command line."""
    import pickle

    err = pickle.loads(pickle.dumps(CriteoFormatError(7, "label not 0/1", "d.tsv")))
    assert (err.line_no, err.reason, err.path) == (7, "label not 0/1", "d.tsv")
    assert str(err).startswith("d.tsv: malformed Criteo line 7: label not 0/1")
