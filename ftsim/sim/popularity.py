"""Row popularity: the Zipf model of which embedding rows a job looks up, as pure functions.

Every table gets one lookup per sample; row k of a table of N rows is looked up with
probability π_k = k^-s / H_N(s), with the exponent s of the scenario's synthetic trainer
data (``trainer.data.zipf_exponent``, one per table if it lists several) or, without one,
the policy's ``popularity_exponent`` (:class:`PopularityParams`, declared once for every
policy that models popularity: CPR-MFU/SSU, Check-N-Run, ``composed`` and the touched-rows
fraction of ECRM and SWIFT). From it: the expected distinct rows among a number of lookups
(:func:`distinct_rows`), the share of lookups the most popular rows carry
(:func:`top_rows_share`) and what SSU's sample buffer holds (:func:`sampled_buffer`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ftsim.scenario.notices import register_no_effect
from ftsim.trainer.limits import MAX_ZIPF_EXPONENT


class PopularityParams(BaseModel):
    """The popularity parameter of a policy's section (a mixin of its ``Params``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    popularity_exponent: float = Field(
        1.05,
        ge=0,
        le=MAX_ZIPF_EXPONENT,
        description="Zipf exponent of row popularity if the trainer has no synthetic data",
    )

    def popularity_unused(self, scenario) -> str | None:
        """Why ``popularity_exponent`` has no effect in ``scenario`` (None: it has one)."""
        data = scenario.trainer.data if scenario.trainer is not None else None
        if data is not None and data.kind == "synthetic":
            return (
                "the trainer's synthetic data sets the row popularity (trainer.data.zipf_exponent)"
            )
        return None


ZipfGroups = tuple[tuple[int, int, float], ...]
"""Embedding tables by popularity: (tables, rows per table, Zipf exponent) per group. Every
table gets one lookup per sample; row k of a table of N rows is looked up with probability
π_k = k^-s / H_N(s)."""

_EXACT_TERMS = 4096
"""Zipf sums add their first terms exactly and integrate the rest."""
_TAIL_NODES = 2049
"""Simpson nodes (an odd number) over log(rank) for the integrated tail of a Zipf sum."""


def data_exponents(scenario) -> float | tuple[float, ...] | None:
    """The Zipf exponent(s) of the scenario's synthetic trainer data (one per table if it
    lists several), None if it has none."""
    data = scenario.trainer.data if scenario.trainer is not None else None
    if data is None or data.kind != "synthetic":
        return None
    exponents = data.zipf_exponent
    return tuple(exponents) if isinstance(exponents, list) else exponents


def row_popularity(
    tables, exponents: float | tuple[float, ...] | None, fallback_exponent: float
) -> ZipfGroups:
    """The job's ``tables`` (its table groups) with the data's Zipf ``exponents`` (one per
    table, in order, if a tuple; :func:`data_exponents`), else ``fallback_exponent``."""
    if isinstance(exponents, tuple):
        rows = [g.rows for g in tables for _ in range(g.count)]
        return tuple((1, n, float(s)) for n, s in zip(rows, exponents, strict=True))
    exponent = fallback_exponent if exponents is None else float(exponents)
    return tuple((g.count, g.rows, exponent) for g in tables)


def popularity_problems(
    exponents: float | tuple[float, ...] | None, tables: int
) -> list[tuple[str, str]]:
    """Why :func:`row_popularity` cannot pair the data's ``exponents`` with the job's
    ``tables`` (lookups per sample), as (field, message) for the policy's
    ``popularity_exponent``; empty if it can."""
    if isinstance(exponents, tuple) and len(exponents) != tables:
        message = (
            f"trainer.data.zipf_exponent lists {len(exponents)} exponents but the job has "
            f"{tables} tables: the time model cannot pair them"
        )
        return [("popularity_exponent", message)]
    return []


def _exact_head(exponent: float) -> np.ndarray:
    """Partial sums [0, 1, 1 + 2^-s, …] of k^-s up to ``_EXACT_TERMS`` terms."""
    k = np.arange(1, _EXACT_TERMS + 1, dtype=np.float64)
    return np.concatenate([[0.0], np.cumsum(k**-exponent)])


def zipf_harmonic(rank: float, exponent: float) -> float:
    """H_r(s) = Σ_{k ≤ r} k^-s for a real rank r ≥ 0 (a fractional r adds that part of term
    ⌊r⌋ + 1). Exact up to 4096 terms; beyond, the midpoint rule ∫_{4096.5}^{r+½} x^-s dx,
    whose error, about s / (24 · 4096^(s+1)), is below 1e-9 of the sum."""
    head = _exact_head(exponent)
    if rank <= _EXACT_TERMS:
        whole = math.floor(rank)
        partial = (rank - whole) * (whole + 1) ** -exponent if rank > whole else 0.0
        return float(head[whole] + partial)
    a, b = _EXACT_TERMS + 0.5, rank + 0.5
    if abs(exponent - 1.0) < 1e-12:
        tail = math.log(b / a)
    else:
        tail = (b ** (1.0 - exponent) - a ** (1.0 - exponent)) / (1.0 - exponent)
    return float(head[-1] + tail)


def zipf_sum(term: Callable[[np.ndarray], np.ndarray], rows: int, exponent: float) -> float:
    """Σ_{k=1}^{rows} term(π_k) over the lookup probabilities π_k = k^-s / H_rows(s) of one
    Zipf table (``term`` maps an array of probabilities to an array): the first 4096 terms
    exactly, the rest as ∫ term(π(x)) dx from 4096.5 to rows + ½ by Simpson's rule in
    log x, so a table of 33 M rows costs a few thousand evaluations."""
    norm = zipf_harmonic(rows, exponent)
    k = np.arange(1, min(rows, _EXACT_TERMS) + 1, dtype=np.float64)
    total = float(term(k**-exponent / norm).sum())
    if rows > _EXACT_TERMS:
        u = np.linspace(math.log(_EXACT_TERMS + 0.5), math.log(rows + 0.5), _TAIL_NODES)
        x = np.exp(u)
        weights = np.ones(_TAIL_NODES)
        weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
        total += float((weights * term(x**-exponent / norm) * x).sum() * (u[1] - u[0]) / 3.0)
    return total


def _hit(draws: float, rate: float = 1.0) -> Callable[[np.ndarray], np.ndarray]:
    """π ↦ 1 − (1 − rate·π)^draws: the probability that a row of lookup probability π is
    among ``draws`` lookups, each kept with probability ``rate``."""

    def hit(p: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):  # rate·π = 1 (a one-row table): log1p → −inf, hit
            return -np.expm1(draws * np.log1p(-rate * p))

    return hit


def distinct_rows(groups: ZipfGroups, draws: float) -> float:
    """Expected number of distinct rows among ``draws`` lookups of every table."""
    return sum(n * zipf_sum(_hit(draws), rows, s) for n, rows, s in groups)


def top_rows_share(groups: ZipfGroups, fraction: float) -> float:
    """Share of all lookups that go to the ``fraction`` of all rows most likely to be looked
    up: what MFU's top-``fraction`` rows of a shard carry, when hot rows are spread evenly
    over the shards.

    Every table gets one lookup per sample, so probabilities compare across tables: the top
    rows are those of probability above a threshold x. A table of group g has
    m_g(x) = min(N_g, ⌊(x·H_g)^(-1/s_g)⌋) of them, which carry H_{m_g}/H_g of its lookups.
    Bisection on log x finds the x at which Σ n_g·m_g(x) reaches the target from below;
    the rows still missing all have probability x (to the bisection's precision).
    """
    tables = sum(n for n, _, _ in groups)
    target = fraction * sum(n * rows for n, rows, _ in groups)
    norms = [zipf_harmonic(rows, s) for _, rows, s in groups]

    def above(x: float) -> list[int]:
        counts = []
        for (_, rows, s), norm in zip(groups, norms, strict=True):
            if s == 0:
                counts.append(rows * int(x * rows <= 1))
                continue
            log_rank = -math.log(x * norm) / s
            counts.append(rows if log_rank >= math.log(rows) else math.floor(math.exp(log_rank)))
        return counts

    def count(x: float) -> int:
        return sum(n * m for (n, _, _), m in zip(groups, above(x), strict=True))

    lowest = [rows**-s / norm for (_, rows, s), norm in zip(groups, norms, strict=True)]
    lo, hi = math.log(min(lowest)) - 1.0, math.log(1.0 / min(norms)) + 1.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if count(math.exp(mid)) > target else (lo, mid)
    x = math.exp(hi)
    carried = sum(
        n * zipf_harmonic(m, s) / norm
        for (n, _, s), m, norm in zip(groups, above(x), norms, strict=True)
    )
    return min(1.0, (carried + (target - count(x)) * x) / tables)


@dataclass(frozen=True, slots=True)
class SampledBuffer:
    """What SSU's buffer holds at a partial save (expected values, all shards together)."""

    share: float
    """Share of all lookups carried by the rows whose ids are in the buffer."""
    rows: float
    """Distinct row ids in the buffer."""
    entries: float
    """Ids in the buffer, with repeats (at most its capacity)."""
    window: float
    """Iterations whose samples the buffer holds."""


def sampled_buffer(
    groups: ZipfGroups, rate: float, lookups: float, capacity: float, iterations: float
) -> SampledBuffer:
    """SSU's buffer after ``iterations`` of ``lookups`` lookups per table each, sampling
    every touched row of a batch with probability 1 − (1 − ``rate``)^c (c its lookups in
    the batch) into a ring buffer of ``capacity`` ids.

    A row of probability π is sampled in a batch with probability 1 − (1 − rate·π)^B (at
    least one of its B draws both hits it and is kept), so a batch adds
    S = Σ_rows 1 − (1 − rate·π)^B ids. The buffer holds the ids of the last
    W = min(iterations, capacity / S) batches, and a row is among them with probability
    q(π) = 1 − (1 − rate·π)^(B·W). Its rows carry Σ π·q(π) of the lookups (per table,
    averaged over tables): frequent rows almost surely, a row of the tail in proportion to
    rate·π·B·W — a sample in proportion to frequency, not MFU's top rows.
    """
    tables = sum(n for n, _, _ in groups)
    per_batch = sum(n * zipf_sum(_hit(lookups, rate), rows, s) for n, rows, s in groups)
    window = min(iterations, capacity / per_batch)
    held = _hit(lookups * window, rate)
    share = sum(n * zipf_sum(lambda p: p * held(p), rows, s) for n, rows, s in groups)
    return SampledBuffer(
        share=share / tables,
        rows=sum(n * zipf_sum(held, rows, s) for n, rows, s in groups),
        entries=window * per_batch,
        window=window,
    )


register_no_effect(PopularityParams, "popularity_exponent", lambda p, s: p.popularity_unused(s))
