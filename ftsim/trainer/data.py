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
BATCHES_TOGETHER = 32
"""Batches a :class:`SharedData` has its source generate together: a replication's batches
cost 0.22 ms each so on prod50h's shapes, 0.48 ms one at a time (amid its training)."""


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


GUIDE_ENTRIES = 1 << 18
"""At most this many guide entries (:class:`PowerLawRows`), else one per row: 2 MB."""


class PowerLawRows:
    """Draws row ids with ``P(rank k) ∝ k**-exponent`` per table (k = 1..rows).

    Ranks map to row ids through a fixed random permutation per table, so hot rows are
    scattered over the id space (and over shards). Memory: 24 bytes per row (CDF, guide, id),
    plus up to 3 guide entries more per row for small tables (2 MB at most).
    """

    def __init__(self, sizes: list[int], exponents: list[float], rng: np.random.Generator):
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        cdfs, perms = [], []
        for t, (n, s) in enumerate(zip(sizes, exponents, strict=True)):
            w = np.arange(1, n + 1, dtype=np.float64) ** -float(s)
            c = np.cumsum(w)
            c /= c[-1]
            c[-1] = 1.0
            cdfs.append(c + t)  # shifted by t: one array serves all tables
            perms.append(rng.permutation(n))
        # every table's CDF in one array between sentinels, -inf and +inf: a walk down stops
        # at a table's first rank (the rank before it, the previous table's last, is t
        # exactly, t <= t + u) and a walk up at the end of the array
        self._padded = np.concatenate([[-np.inf], *cdfs, [np.inf]])
        self._cdf = self._padded[1:-1]
        self._row_of_pos = np.concatenate(perms).astype(np.int64)
        self._sizes = np.asarray(sizes, dtype=np.int64)
        self._shift = np.arange(len(sizes), dtype=np.float64)
        self._last = self.offsets[1:]  # padded position of each table's last rank
        # guide table: m buckets per row; bucket b of table t (u in [b/(m n_t),
        # (b+1)/(m n_t))) starts its search at the first padded position whose CDF exceeds
        # t + b/(m n_t), so a draw needs a comparison or two (Zipf 1.05, 1000 rows, m = 4)
        m = int(np.clip(GUIDE_ENTRIES // max(1, self.offsets[-1]), 1, 4))
        buckets = m * self._sizes
        self._buckets = buckets.astype(np.float64)
        self._bucket0 = np.concatenate([[0], np.cumsum(buckets)[:-1]])
        table_of = np.repeat(np.arange(len(sizes)), buckets)
        bucket = np.arange(int(buckets.sum())) - self._bucket0[table_of]
        self._guide = np.searchsorted(
            self._padded, table_of + bucket / self._buckets[table_of], "right"
        )

    def sample(self, u: np.ndarray) -> np.ndarray:
        """Uniforms ``u`` (B, T) in [0, 1) -> local row ids (B, T).

        Inverse-CDF sampling: the first rank whose CDF exceeds ``u`` (same result as
        ``searchsorted(cdf_t, u, side="right")``, the last rank if ``t + u`` rounds up to
        ``t + 1``), found from the guide table in a few steps: down while the CDF before
        the position exceeds ``t + u`` (after rounding only), then up while the CDF at it
        does not; any start reaches that first rank, and no walk leaves the table but up
        from its last rank when ``t + u`` rounded up.
        """
        x = (u + self._shift).reshape(-1)
        start = (u * self._buckets).astype(np.int64)
        start += self._bucket0
        pos = np.take(self._guide, start.reshape(-1), mode="clip")
        cdf = self._padded
        sel = np.flatnonzero(np.take(cdf, pos - 1) > x)  # walk down (rounding only)
        while sel.size:
            pos[sel] -= 1
            sel = sel[cdf[pos[sel] - 1] > x[sel]]
        sel = np.flatnonzero(np.take(cdf, pos) <= x)  # walk up within the bucket
        while sel.size:
            pos[sel] += 1
            sel = sel[cdf[pos[sel]] <= x[sel]]
        pos = pos.reshape(u.shape)
        np.minimum(pos, self._last, out=pos)  # t + u rounded up to t + 1
        pos -= 1
        return np.take(self._row_of_pos, pos)

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

    def raw_logit(self, dense: np.ndarray, cat: np.ndarray, block: int | None = None) -> np.ndarray:
        """Logit without the bias, (B,) float64.

        ``block``: the dense term is one matrix-vector product per ``block`` samples (the
        batches generated together, each as if alone: BLAS may round a row of a longer
        product differently); every other term is per sample.
        """
        g = cat + self.offsets[:-1]
        v = np.take(self.vectors, g, axis=0)  # (B, T, k)
        total = np.einsum("btk->bk", v)
        pairs = 0.5 * (np.einsum("bk,bk->b", total, total) - np.einsum("btk,btk->b", v, v))
        step = block or max(1, len(dense))
        linear = np.concatenate(
            [dense[a : a + step] @ self.w_dense for a in range(0, len(dense), step)]
        )
        return linear + np.take(self.first, g).sum(axis=1) + pairs

    def prob(self, dense: np.ndarray, cat: np.ndarray, block: int | None = None) -> np.ndarray:
        """Click probability (B,) float64 (``block``: see :meth:`raw_logit`)."""
        return 1.0 / (1.0 + np.exp(-(self.raw_logit(dense, cat, block) + self.bias)))

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

    def _make(self, rngs: list[np.random.Generator], n: int) -> list[Batch]:
        """One batch of ``n`` samples per generator, generated together. Each batch draws
        from its own generator what a batch made alone draws, in the same order (dense
        features, row uniforms, label uniforms); then the row sampler and the teacher run
        once over all the samples: their work is per sample, so each batch is the same as
        made alone (tested), and a batch costs about half as much in groups of 16."""
        k, n_tables = len(rngs), len(self.table_sizes)
        dense = np.empty((k, n, self.n_dense), np.float32)
        u = np.empty((k, n, n_tables))
        v = np.empty((k, n))
        for j, rng in enumerate(rngs):
            rng.standard_normal(dtype=np.float32, out=dense[j])
            rng.random(out=u[j])
            rng.random(out=v[j])
        dense = dense.reshape(k * n, self.n_dense)
        cat = self.rows.sample(u.reshape(k * n, n_tables))
        prob = self.teacher.prob(dense, cat, block=n)
        label = (v.reshape(-1) < prob).astype(np.float32)
        parts = [slice(j * n, (j + 1) * n) for j in range(k)]
        return [Batch(dense[p], cat[p], label[p], prob[p]) for p in parts]

    def batch(self, index: int) -> Batch:
        """Training batch number ``index`` (any order, any number of times)."""
        return self.batches(index, index + 1)[0]

    def batches(self, start: int, stop: int) -> list[Batch]:
        """Training batches ``start .. stop - 1``, each the same as :meth:`batch` of its index,
        generated together (cheaper per batch)."""
        seed = self.cfg.seed
        rngs = [np.random.default_rng([seed, _TRAIN, i]) for i in range(start, stop)]
        return self._make(rngs, self.batch_size)

    def eval_set(self, n: int) -> Batch:
        """Held-out samples (independent of every training batch)."""
        return self._make([np.random.default_rng([self.cfg.seed, _EVAL])], n)[0]


class SharedData:
    """One data source for several trainers, built once and shared read-only.

    A replication's failure-free trainer, its forks and the other policies' trainers train on
    the same batches: batch ``i`` is generated once and the same object handed to each of them
    (with what they derived from it, :attr:`Batch.derived`), and so is the held-out set; the
    source's fixed tables and calibration are built once. Everything else (``table_sizes``,
    ``n_dense``, ...) is the source's. Holds every batch it handed out: one replication's
    worth (~160 KB per batch of 256 at prod50h's shapes, lookup indices included).

    ``until``: the trainers ask for batches ``0 .. until - 1`` (None: unknown). Those are
    generated :data:`BATCHES_TOGETHER` at a time (the aligned group of the one asked for),
    others one at a time.
    """

    def __init__(self, data, until: int | None = None) -> None:
        self.source = data
        self.until = until
        self._batches: dict[int, Batch] = {}
        self._eval_sets: dict[int, Batch] = {}

    def batch(self, index: int) -> Batch:
        """Training batch number ``index`` (generated on first use)."""
        found = self._batches.get(index)
        if found is None:
            start, stop = index, index + 1
            if self.until is not None and index < self.until:
                start = index - index % BATCHES_TOGETHER
                stop = min(start + BATCHES_TOGETHER, self.until)
            for i, made in enumerate(self.source.batches(start, stop), start):
                self._batches.setdefault(i, made)
            found = self._batches[index]
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
