"""The one statistics module: Student-t intervals, per point and policy, paired differences.

Every interval of ftsim (the summaries of ``run`` and ``sweep``, the figures, the stopping
rule of ``--target-halfwidth``, the validation checks) comes from here, with one name per
meaning: :func:`t_quantile` takes a *probability* (the p-quantile, like
``scipy.stats.t.ppf``), :func:`t_critical` a *confidence level* (the two-sided critical
value). Both are computed without scipy (0.9 s of start-up for one number); pandas is
imported only by the functions that take or return a DataFrame.

Replication *i* of every policy at every point saw the same failures (common random
numbers), so a policy is compared with the reference policy on matched replications: the
interval of the mean difference is much narrower than the difference of two intervals.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

CONFIDENCE = 0.95
"""Two-sided confidence level of every interval."""

KEY = ("point", "policy")
"""A summary row: one policy at one sweep point (a plain run is point 0)."""

METRICS = (
    "overhead_frac",
    "ettr",
    "wall_h",
    "save_h",
    "load_h",
    "lost_h",
    "reschedule_h",
    "degraded_h",
    "other_h",
    "n_failures",
    "n_checkpoints",
    "final_logloss",
    "final_auc",
    "logloss_delta",
    "auc_delta",
    "pls_measured",
    "pls_model",
    "pls_predicted",
)
"""Columns summarised with mean, std and interval (those present in the runs). Each interval
is over the replications that have the column: all of them for the time model's columns,
the trained ones (``n_trained``) for the accuracy columns and ``pls_measured``."""

PAIRED = ("overhead_frac", "logloss_delta")
"""Columns also compared with the reference policy on matched replications."""

SI_SUFFIX = "_si"
"""A swept key's numeric column in SI base units (seconds, bytes, bytes/s) is named
``<key>_si``; it travels with the key's text column into the summary."""

_NOT_METRICS = {"point", "rep", "seed", "completed"}


# -- Student's t distribution ----------------------------------------------------------------


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (Numerical Recipes §6.4)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) for 0 ≤ x ≤ 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * regularized_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_pdf(t: float, df: float) -> float:
    """The density of Student's t with ``df`` degrees of freedom at ``t``."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))


def t_quantile(p: float, df: float) -> float:
    """The ``p``-quantile of Student's t with ``df`` degrees of freedom (0 < p < 1), as
    ``scipy.stats.t.ppf(p, df)``: Newton steps on :func:`t_cdf` kept inside a bracket that
    bisection shrinks whenever a step would leave it, until the step is below rounding."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1) (got {p})")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, 2.0 * high
    x = 0.5 * (low + high)
    for _ in range(200):
        error = t_cdf(x, df) - p
        if error < 0:
            low = x
        else:
            high = x
        step = error / t_pdf(x, df)
        new = x - step
        if not low < new < high:  # Newton would leave the bracket: bisect
            new = 0.5 * (low + high)
        if abs(new - x) <= 4 * math.ulp(x) or new in (low, high):
            return new
        x = new
    return x


def t_critical(confidence: float, df: float) -> float:
    """The two-sided critical value at ``confidence`` (e.g. 2.262 for 0.95 and df = 9): the
    half-width of a t-interval is ``t_critical(confidence, n - 1) * std / sqrt(n)``."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1) (got {confidence})")
    return t_quantile(0.5 + confidence / 2.0, df)


def t_interval(
    values, confidence: float = CONFIDENCE, critical: dict[int, float] | None = None
) -> dict[str, float]:
    """Mean, sample std (ddof 1), n and the t-interval (``low``, ``high``) of the mean; NaN
    values are dropped. With n < 2 the std and the interval are NaN. ``critical``, when
    given, keeps the critical values computed per degrees of freedom for the next calls
    at the same ``confidence`` (a summary computes thousands of intervals over a few n)."""
    x = [float(v) for v in values]
    x = [v for v in x if v == v]
    n = len(x)
    mean = math.fsum(x) / n if n else math.nan
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in x) / (n - 1)) if n > 1 else math.nan
    half = math.nan
    if n > 1:
        known = {} if critical is None else critical
        if n - 1 not in known:
            known[n - 1] = t_critical(confidence, n - 1)
        half = known[n - 1] * std / math.sqrt(n)
    return {"mean": mean, "std": std, "n": n, "low": mean - half, "high": mean + half}


def mean_ci(values, confidence: float = CONFIDENCE) -> tuple[float, float, int]:
    """(mean, half-width of the t-interval, n) of ``values`` (see :func:`t_interval`)."""
    s = t_interval(values, confidence)
    return s["mean"], (s["high"] - s["low"]) / 2, s["n"]


# -- summaries of run and sweep results ------------------------------------------------------


def with_point(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with a ``point`` column (0 for the rows of a plain ``run``)."""
    # copy() consolidates a wide frame read column by column (a composed policy's part
    # columns): adding a column to it otherwise warns that it is fragmented
    return runs if "point" in runs else runs.copy().assign(point=0)


def summarize(
    runs: pd.DataFrame,
    point_columns: list[str] = (),
    reference: str | None = None,
    confidence: float = CONFIDENCE,
) -> pd.DataFrame:
    """:func:`summary_records` of the DataFrame ``runs``, as a DataFrame."""
    import pandas as pd

    columns = {c: runs[c].to_numpy() for c in runs.columns}
    return pd.DataFrame(summary_records(columns, point_columns, reference, confidence))


def arrow_columns(table) -> dict[str, np.ndarray]:
    """The columns of a pyarrow table of runs as NumPy arrays, as pandas reads them from
    Parquet: integers with a null become floats with NaN, other columns with nulls (or of
    no number type) objects; so that :func:`summary_records` needs no pandas. (pyarrow's
    own ``to_numpy`` imports pandas: numbers are read from the data buffer instead.)"""
    import numpy as np

    numbers = {"int64": np.int64, "double": np.float64}
    columns = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        kind = str(column.type)
        if kind in numbers and column.null_count == 0:
            data = column.buffers()[1]
            dtype = numbers[kind]
            offset = column.offset * np.dtype(dtype).itemsize
            columns[name] = np.frombuffer(data, dtype, len(column), offset).copy()
        elif kind in numbers:
            values = column.to_pylist()
            columns[name] = np.array([math.nan if v is None else v for v in values], float)
        elif kind == "bool" and column.null_count == 0:
            columns[name] = np.array(column.to_pylist(), dtype=bool)
        else:
            columns[name] = np.array(column.to_pylist(), dtype=object)
    return columns


def summary_records(
    runs: Mapping[str, np.ndarray],
    point_columns: Sequence[str] = (),
    reference: str | None = None,
    confidence: float = CONFIDENCE,
) -> list[dict]:
    """One row per (point, policy), in the order of ``runs`` (columns as NumPy arrays, from
    a DataFrame or :func:`arrow_columns`), over finished replications: the ``summary.csv``
    of both ``run`` (one point, no swept columns) and ``sweep``, as the records of a
    DataFrame (every row has every column; NaN where a row has no value). Computed without
    pandas (a run's start-up would otherwise import it: 0.3 s), with pandas' arithmetic:
    the same numbers, bit for bit.

    A replication stopped at ``run.max_wall_factor`` (``completed`` false) has no overhead:
    it is counted in ``n_unfinished`` and left out of every statistic and paired difference.

    Columns: ``point``, the swept ``point_columns`` (each followed by its ``<key>_si``
    column when the runs have one), ``policy``, ``kind``, ``n`` (finished replications),
    ``n_unfinished``, ``n_trained`` (finished ones that trained the model, when some
    did); for each metric present (:data:`METRICS`), ``{m}_mean``, ``{m}_std``,
    ``{m}_ci95_low``, ``{m}_ci95_high`` (``overhead_frac`` also ``_ci95_half``); other
    numeric columns (policy parameters such as ``interval_h``) as ``{c}_mean``; then
    ``reference`` and, for each paired column (:data:`PAIRED`), ``{m}_diff_mean``,
    ``{m}_diff_ci95_low``, ``{m}_diff_ci95_high``, ``{m}_diff_n``: the difference policy −
    reference over the replications both have at that point. ``reference`` defaults to the
    first policy.
    """
    import numpy as np

    runs = dict(runs)
    n_rows = len(runs["policy"])
    if "point" not in runs:
        runs["point"] = np.zeros(n_rows, dtype=np.int64)
    point_columns = [
        c for key in point_columns for c in (key, key + SI_SUFFIX) if c == key or c in runs
    ]
    policies = runs["policy"]
    reference = reference or policies[0]
    done = _finished(runs, n_rows)
    metrics = [m for m in METRICS if m in runs and _numeric_array(runs[m])]
    others = [
        c
        for c in runs
        if c not in metrics
        and c not in _NOT_METRICS
        and c not in point_columns
        and _numeric_array(runs[c])
    ]
    decisions = [c for c in runs if c == "cpr_decision" or c.endswith("/cpr_decision")]
    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(zip(runs["point"].tolist(), policies.tolist(), strict=True)):
        groups.setdefault(key, []).append(i)
    out, critical = [], {}
    for (point, policy), everything in groups.items():
        group = [i for i in everything if done[i]]
        first = everything[0]
        row = {"point": point}
        row.update({c: runs[c][first] for c in point_columns})
        row.update(policy=policy, kind=runs["kind"][first], n=len(group))
        for column in decisions:  # decided when planning: a composed policy's per part
            if isinstance(runs[column][first], str):
                row[column] = runs[column][first]
        row["n_unfinished"] = len(everything) - len(group)
        if "logloss_delta" in metrics:
            values = runs["logloss_delta"][group]
            row["n_trained"] = int(np.count_nonzero(values == values))
        for m in metrics:
            s = t_interval(runs[m][group], confidence, critical)
            row.update(
                {f"{m}_mean": s["mean"], f"{m}_std": s["std"]},
                **{f"{m}_ci95_low": s["low"], f"{m}_ci95_high": s["high"]},
            )
            if m == "overhead_frac":
                row["overhead_frac_ci95_half"] = (s["high"] - s["low"]) / 2
        row.update({f"{c}_mean": _nanmean(runs[c][group]) for c in others})
        row["reference"] = reference
        ref = groups.get((point, reference), [])
        ref = [i for i in ref if done[i]]
        for m in (m for m in PAIRED if m in metrics):
            d = t_interval(_paired(runs, group, ref, m), confidence, critical)
            row.update(
                {f"{m}_diff_mean": d["mean"], f"{m}_diff_ci95_low": d["low"]},
                **{f"{m}_diff_ci95_high": d["high"], f"{m}_diff_n": d["n"]},
            )
        out.append(row)
    return _frame_records(out)


def _finished(runs: Mapping[str, np.ndarray], n_rows: int) -> list[bool]:
    """Per row: whether the replication finished training before ``run.max_wall_factor`` ×
    the failure-free time (an unfinished one has no overhead: its ``overhead_frac`` is inf).
    All rows of runs without a ``completed`` column."""
    if "completed" not in runs:
        return [True] * n_rows
    return [str(v).lower() == "true" for v in runs["completed"].tolist()]


def paired_differences(group: pd.DataFrame, reference: pd.DataFrame, metric: str) -> list:
    """``metric`` of ``group`` minus that of ``reference``, on the replications both have
    (in the order of the replications)."""
    return _differences(
        group["rep"].tolist(), group[metric].to_numpy(), reference["rep"].tolist(),
        reference[metric].to_numpy(),
    )  # fmt: skip


def _paired(runs, group: list[int], reference: list[int], metric: str) -> list:
    """:func:`paired_differences` of two groups of rows (indices into the columns ``runs``)."""
    values, reps = runs[metric], runs["rep"]
    return _differences(
        reps[group].tolist(), values[group], reps[reference].tolist(), values[reference]
    )


def _differences(mine_reps: list, mine, their_reps: list, theirs) -> list:
    """``mine`` minus ``theirs`` on the replications both have (each replication's last
    value, as a lookup by replication finds it), in the order of the replications."""
    mine = dict(zip(mine_reps, mine, strict=True))
    theirs = dict(zip(their_reps, theirs, strict=True))
    return [mine[rep] - theirs[rep] for rep in sorted(mine.keys() & theirs.keys())]


def _nanmean(values: np.ndarray) -> float:
    """The mean of the values that are not NaN (NaN if none), with pandas' (NumPy's pairwise)
    summation, so that it equals ``Series.mean()`` bit for bit."""
    import numpy as np

    values = np.asarray(values, dtype=float)
    missing = values != values
    count = len(values) - int(np.count_nonzero(missing))
    if not count:
        return math.nan
    if count < len(values):
        values = np.where(missing, 0.0, values)
    return float(values.sum() / float(count))


def _numeric_array(values: np.ndarray) -> bool:
    """A numeric column (not a flag): as pandas' ``is_numeric_dtype`` without bool."""
    return values.dtype.kind in "iufc"


def _frame_records(rows: list[dict]) -> list[dict]:
    """``pd.DataFrame(rows).to_dict("records")`` without pandas: every row gets every column
    (NaN where it has none); a column of integers with a gap, or of integers and floats,
    holds floats; NumPy scalars become Python ones."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    out: list[dict] = [{} for _ in rows]
    for column in columns:
        values = [_native(row.get(column, math.nan)) for row in rows]
        kinds = {_kind(v) for v in values}
        if kinds <= {"int", "float"} and "float" in kinds:
            values = [float(v) for v in values]
        for record, value in zip(out, values, strict=True):
            record[column] = value
    return out


def _native(value):
    """A NumPy scalar as the Python scalar it holds."""
    return value.item() if hasattr(value, "item") and hasattr(value, "dtype") else value


def _kind(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return "other"


def half_width(summary_row, prefix: str) -> float:
    """Half-width of the interval ``{prefix}_ci95_low`` … ``_high`` of a summary row (NaN
    if absent)."""
    get = summary_row.get
    return (get(f"{prefix}_ci95_high", math.nan) - get(f"{prefix}_ci95_low", math.nan)) / 2
