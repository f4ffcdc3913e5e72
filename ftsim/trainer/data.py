"""Synthetic click data with learnable labels (hidden teacher) and power-law row popularity.

Batch ``i`` is a pure function of ``(seed, i)``: its random numbers come from the stream
``default_rng([seed, 1, i])``, so any batch can be regenerated at any time (replay after a
restore) and nothing but the generator's fixed tables is held in memory.

Teacher (click logit of a sample with dense features ``x`` and rows ``r_t``)::

    logit = bias + w . x + sum_t s_t[r_t] + sum_{i<j} <v_i[r_i], v_j[r_j]>

with per-row scalars ``s_t`` and per-row vectors ``v_t`` (``teacher_dim``), all Gaussian. The
three parts have standard deviations of about 0.5, 1.0 and 0.8 (times ``teacher_scale``);
``bias`` is calibrated so that the mean click probability equals ``positive_rate``. A DLRM
with ``embedding_dim >= teacher_dim`` can represent this function exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ftsim.trainer.config import SyntheticDataConfig

_TRAIN, _EVAL, _CALIB = 1, 2, 3  # stream tags


@dataclass
class Batch:
    """One mini-batch. ``dense`` (B, n_dense) float32; ``cat`` (B, T) int64 row ids local to
    each table; ``label`` (B,) float32 in {0, 1}; ``prob`` (B,) float64 teacher click
    probability (synthetic data only, else None).

    ``derived``: what consumers computed from the batch alone, kept with it so that every
    trainer training the same batch object computes it once (e.g. the trainer's lookup
    indices); entries are never modified once stored.
    """

    dense: np.ndarray
    cat: np.ndarray
    label: np.ndarray
    prob: np.ndarray | None = None
    derived: dict = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.label)


class PowerLawRows:
    """Draws row ids with ``P(rank k) ∝ k**-exponent`` per table (k = 1..rows).

    Ranks map to row ids through a fixed random permutation per table, so hot rows are
    scattered over the id space (and over shards). Memory: 24 bytes per row (CDF, guide, id).
    """

    def __init__(self, sizes: list[int], exponents: list[float], rng: np.random.Generator):
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        cdfs, perms = [], []
        for t, (n, s) in enumerate(zip(sizes, exponents, strict=True)):
            w = np.arange(1, n + 1, dtype=np.float64) ** -float(s)
            c = np.cumsum(w)
            c /= c[-1]
            c[-1] = 1.0
            cdfs.append(c + t)  # shifted by t: one searchsorted serves all tables
            perms.append(rng.permutation(n))
        self._cdf = np.concatenate(cdfs)
        self._row_of_pos = np.concatenate(perms).astype(np.int64)
        self._sizes = np.asarray(sizes, dtype=np.int64)
        # guide table: bucket b of table t (u in [b/n_t, (b+1)/n_t)) starts its search at
        # the first position whose CDF exceeds t + b/n_t, so a draw needs a few comparisons
        table_of = np.repeat(np.arange(len(sizes)), sizes)
        bucket = np.arange(self.offsets[-1]) - self.offsets[table_of]
        self._guide = np.searchsorted(self._cdf, table_of + bucket / self._sizes[table_of], "right")
        self._layouts: dict[tuple[int, int], tuple[np.ndarray, ...]] = {}

    def sample(self, u: np.ndarray) -> np.ndarray:
        """Uniforms ``u`` (B, T) in [0, 1) -> local row ids (B, T).

        Inverse-CDF sampling: the first rank whose CDF exceeds ``u`` (same result as
        ``searchsorted(cdf_t, u, side="right")``), found from the guide table in a few steps.
        """
        lo, hi, size, shift = self._layout(u.shape)
        x = (u + shift).reshape(-1)
        pos = np.take(self._guide, lo + (u.reshape(-1) * size).astype(np.int64))
        np.clip(pos, lo, hi, out=pos)
        cdf = self._cdf
        sel = np.flatnonzero((pos > lo) & (np.take(cdf, pos - 1) > x))  # walk down (rounding only)
        while sel.size:
            pos[sel] -= 1
            sel = sel[(pos[sel] > lo[sel]) & (cdf[pos[sel] - 1] > x[sel])]
        sel = np.flatnonzero((pos < hi) & (np.take(cdf, pos) <= x))  # walk up within the bucket
        while sel.size:
            pos[sel] += 1
            sel = sel[(pos[sel] < hi[sel]) & (cdf[pos[sel]] <= x[sel])]
        return np.take(self._row_of_pos, pos).reshape(u.shape)

    def _layout(self, shape: tuple[int, int]) -> tuple[np.ndarray, ...]:
        """Per draw of a (B, T) array, flattened: first and last position of its table in the
        CDF, the table's size (float64), and the table index as the CDF's shift (made once
        per shape)."""
        found = self._layouts.get(shape)
        if found is None:
            table = np.tile(np.arange(shape[1]), shape[0])
            found = self._layouts[shape] = (
                self.offsets[:-1][table],
                self.offsets[1:][table] - 1,  # also guards t + u rounding up to t + 1
                self._sizes[table].astype(np.float64),
                np.arange(shape[1], dtype=np.float64),
            )
        return found

    def top_share(self, table: int, fraction: float) -> float:
        """Expected share of lookups of ``table`` that go to its top ``fraction`` of rows."""
        n = int(self._sizes[table])
        k = max(1, int(np.ceil(fraction * n)))
        return float(self._cdf[self.offsets[table] + k - 1] - table)


class Teacher:
    """Hidden model that produces the click probabilities (see module docstring)."""

    def __init__(
        self,
        sizes: list[int],
        n_dense: int,
        dim: int,
        scale: float,
        rng: np.random.Generator,
    ) -> None:
        n_tables = len(sizes)
        n_rows = int(np.sum(sizes))
        n_pairs = max(1, n_tables * (n_tables - 1) // 2)
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.w_dense = rng.normal(0.0, 0.5 * scale / np.sqrt(n_dense), size=n_dense)
        self.first = rng.normal(0.0, 1.0 * scale / np.sqrt(n_tables), size=n_rows)
        pair_std = (0.8 * scale) ** 0.5 / (dim * n_pairs) ** 0.25
        self.vectors = rng.normal(0.0, pair_std, size=(n_rows, dim))
        self.bias = 0.0

    def raw_logit(self, dense: np.ndarray, cat: np.ndarray) -> np.ndarray:
        """Logit without the bias, (B,) float64."""
        g = cat + self.offsets[:-1]
        v = np.take(self.vectors, g, axis=0)  # (B, T, k)
        total = np.einsum("btk->bk", v)
        pairs = 0.5 * (np.einsum("bk,bk->b", total, total) - np.einsum("btk,btk->b", v, v))
        return dense @ self.w_dense + np.take(self.first, g).sum(axis=1) + pairs

    def prob(self, dense: np.ndarray, cat: np.ndarray) -> np.ndarray:
        """Click probability (B,) float64."""
        return 1.0 / (1.0 + np.exp(-(self.raw_logit(dense, cat) + self.bias)))

    def calibrate(self, raw: np.ndarray, rate: float) -> None:
        """Set the bias so that the mean probability over logits ``raw`` equals ``rate``."""
        lo, hi = -30.0, 30.0
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if np.mean(1.0 / (1.0 + np.exp(-(raw + mid)))) < rate:
                lo = mid
            else:
                hi = mid
        self.bias = 0.5 * (lo + hi)


class SyntheticData:
    """Deterministic stream of synthetic batches plus a fixed held-out set."""

    def __init__(self, cfg: SyntheticDataConfig, batch_size: int, calib_samples: int = 16_384):
        self.cfg = cfg
        self.batch_size = batch_size
        self.table_sizes = cfg.table_sizes()
        self.n_dense = cfg.n_dense
        n_tables = len(self.table_sizes)
        exps = cfg.zipf_exponent
        exps = list(exps) if isinstance(exps, list) else [float(exps)] * n_tables
        rng = np.random.default_rng([cfg.seed, 0])
        self.rows = PowerLawRows(self.table_sizes, exps, rng)
        self.teacher = Teacher(
            self.table_sizes, cfg.n_dense, cfg.teacher_dim, cfg.teacher_scale, rng
        )
        calib = self._draw(np.random.default_rng([cfg.seed, _CALIB]), calib_samples)
        self.teacher.calibrate(self.teacher.raw_logit(calib[0], calib[1]), cfg.positive_rate)

    def _draw(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        dense = rng.standard_normal((n, self.n_dense), dtype=np.float32)
        cat = self.rows.sample(rng.random((n, len(self.table_sizes))))
        return dense, cat

    def _make(self, rng: np.random.Generator, n: int) -> Batch:
        dense, cat = self._draw(rng, n)
        prob = self.teacher.prob(dense, cat)
        label = (rng.random(n) < prob).astype(np.float32)
        return Batch(dense, cat, label, prob)

    def batch(self, index: int) -> Batch:
        """Training batch number ``index`` (any order, any number of times)."""
        return self._make(np.random.default_rng([self.cfg.seed, _TRAIN, index]), self.batch_size)

    def eval_set(self, n: int) -> Batch:
        """Held-out samples (independent of every training batch)."""
        return self._make(np.random.default_rng([self.cfg.seed, _EVAL]), n)


class SharedData:
    """One data source for several trainers, built once and shared read-only.

    A replication's failure-free trainer, its forks and the other policies' trainers train on
    the same batches: batch ``i`` is generated once and the same object handed to each of them
    (with what they derived from it, :attr:`Batch.derived`), and so is the held-out set; the
    source's fixed tables and calibration are built once. Everything else (``table_sizes``,
    ``n_dense``, ...) is the source's. Holds every batch it handed out: one replication's
    worth (~160 KB per batch of 256 at prod50h's shapes, lookup indices included).
    """

    def __init__(self, data) -> None:
        self.source = data
        self._batches: dict[int, Batch] = {}
        self._eval_sets: dict[int, Batch] = {}

    def batch(self, index: int) -> Batch:
        """Training batch number ``index`` (generated on first use)."""
        found = self._batches.get(index)
        if found is None:
            found = self._batches[index] = self.source.batch(index)
        return found

    def eval_set(self, n: int) -> Batch:
        """The source's held-out set of ``n`` samples (built on first use)."""
        found = self._eval_sets.get(n)
        if found is None:
            found = self._eval_sets[n] = self.source.eval_set(n)
        return found

    def __getattr__(self, name: str):
        if name == "source":  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.source, name)
